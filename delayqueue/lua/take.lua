-- take.lua: one step of a consumer, in one call: ack a delivery (optional),
-- pump, lease up to n ready jobs, and say when to look next.
--
--   1. Ack: when ARGV[11] names a job, delete it if the delivery of attempt
--      ARGV[12] holds its lease (the handler returned nil).
--   2. Pump: move due jobs from scheduled to ready, and take back jobs whose
--      lease ended (a consumer crashed or stalled), at most ARGV[5] of each
--      (asynq's forwarder cap). A taken-back job goes to ready, due at its
--      lease deadline, or to dead when it has used its attempts.
--   3. Claim: pop up to n ready jobs, due first (ties: the smallest id), and
--      lease each: it moves to inflight until now + visibility, and its attempt
--      count goes up by one. The attempt number is the lease's fencing token:
--      extend, ack and retry act only for the delivery that holds it. The
--      deliveries' call IDs are this take's call ID followed by "." and their
--      place in the reply (0, 1, ...); their ack or retry leaves its receipt
--      under that.
--   4. Plan: the caller should look again at wake_us: at once while ready
--      jobs are left, else at the earliest due time or lease deadline, and
--      after ARGV[9] µs (MaxPoll) at the latest. One idle consumer is the
--      waker (KEYS[10]: "<plan_us>:<until_us>:<runner>", live while until_us >
--      now): it wakes at the plan; the other idle consumers sleep until its
--      until_us (plan + MaxPoll), unless a message wakes them, so that a due
--      time wakes one consumer, not all. A consumer with a slot free after
--      this call (n - claimed + ARGV[8] > 0) and a runner ID becomes the
--      waker when there is none, when it is the waker already, or when the
--      waker plans later than needed; a waker that has no free slot left gives
--      the role up and publishes the next due time for the others. When this
--      call made jobs ready and some are left unclaimed, "now" is published so
--      that idle consumers come and take them.
--
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] ready (zset: id -> due µs);
-- KEYS[3] inflight (zset: id -> lease deadline µs); KEYS[4] dead (zset: id -> µs of death);
-- KEYS[5] payloads (hash); KEYS[6] meta (hash: id -> "attempt:due_us");
-- KEYS[7] calls (hash, see enqueue.lua); KEYS[8] this take's receipt (string);
-- KEYS[9] the acked delivery's receipt (string; any key of the queue when no ack);
-- KEYS[10] the waker (string)
-- ARGV[1] now µs or "" for TIME; ARGV[2] n, how many jobs to lease at most (0: none);
-- ARGV[3] visibility µs; ARGV[4] receipt lifetime µs; ARGV[5] pump batch size;
-- ARGV[6] max attempts; ARGV[7] the caller's runner ID, "" when it cannot be woken by
-- a message (never the waker); ARGV[8] the caller's free slots besides n;
-- ARGV[9] MaxPoll µs; ARGV[10] the queue's channel; ARGV[11] id of the job to ack, "" for none;
-- ARGV[12] the acking delivery's attempt
-- reply: {acked, moved, requeued, dead, ready, next_due_us, next_deadline_us, now_us,
--   wake_us, waker, id, payload, attempt, due_us, deadline_us, id, payload, ...}
-- acked: 1 acked, 0 the lease is lost (nothing changed), -1 no ack asked;
-- ready: jobs left in ready; next_due_us / next_deadline_us: the head of
-- scheduled / inflight, -1 when empty; waker: 1 when the caller is the waker.
--
-- Receipts: every call that changes a job (take, ack, retry, cancel, requeue)
-- carries a call ID that a client's resends of it share, and leaves what it did
-- in a string under "dq:k:<call ID>", "<deadline_us>:<what>", lasting ARGV[4] µs
-- by the clock the scripts use (the key's TTL only collects it), so that a
-- second run of the same call answers as the first without acting again. A take
-- that leased jobs leaves 't' and "<attempt>:<length of id>:<id>" per job; a
-- delivery's ack 'a' and its retry 'r<code>:<due_us>' under the delivery's
-- call ID; 'x' is a cancel's, 'q' a requeue's.
--
-- Safe to run twice: the ack finds its receipt 'a' and answers 1; the claim
-- finds its receipt and returns the same deliveries, those that still hold
-- their lease, leasing nothing more; the pump does the next part of the same
-- work (moves the next due jobs, if any).
local now = clock(ARGV[1])
local snow = string.format('%d', now)
local n = tonumber(ARGV[2])
local batch = tonumber(ARGV[5])
local maxAttempts = tonumber(ARGV[6])
local runner = ARGV[7]
local poll = tonumber(ARGV[9])
local channel = ARGV[10]

-- 1. Ack.
local acked = -1
if ARGV[11] ~= '' then
  local id = ARGV[11]
  if receipt(KEYS[9], now) == 'a' then
    acked = 1
  elseif redis.call('ZSCORE', KEYS[3], id) and
      string.match(redis.call('HGET', KEYS[6], id) or '', '^(%d+):') == ARGV[12] then
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
    redis.call('HDEL', KEYS[7], id)
    setReceipt(KEYS[9], now, ARGV[4], 'a')
    acked = 1
  else
    acked = 0
  end
end

-- 2. Pump. Scores come back as strings that Redis formats exactly (%.17g),
-- so they are passed on unchanged.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', snow, 'WITHSCORES', 'LIMIT', 0, batch)
local moved = {}
if #due > 0 then
  local args = {}
  for i = 1, #due, 2 do
    args[#args + 1] = due[i + 1]
    args[#args + 1] = due[i]
    moved[#moved + 1] = due[i]
  end
  redis.call('ZADD', KEYS[2], unpack(args))
  redis.call('ZREM', KEYS[1], unpack(moved))
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', snow, 'WITHSCORES', 'LIMIT', 0, batch)
local back, requeued, dead = {}, 0, 0
for i = 1, #expired, 2 do
  local id, deadline = expired[i], expired[i + 1]
  local attempt = tonumber(string.match(redis.call('HGET', KEYS[6], id) or '0:0', '^(%d+):')) or 0
  if attempt >= maxAttempts then
    redis.call('ZADD', KEYS[4], snow, id)
    dead = dead + 1
  else
    redis.call('ZADD', KEYS[2], deadline, id)
    redis.call('HSET', KEYS[6], id, string.format('%d:', attempt) .. deadline)
    requeued = requeued + 1
  end
  back[#back + 1] = id
end
if #back > 0 then redis.call('ZREM', KEYS[3], unpack(back)) end

-- 3. Claim.
local out = {}
local function deliver(id, payload, attempt, jdue, deadline)
  out[#out + 1] = id
  out[#out + 1] = payload or ''
  out[#out + 1] = attempt
  out[#out + 1] = jdue
  out[#out + 1] = deadline
end
local seen = receipt(KEYS[8], now)
local claimed = 0
if seen then
  -- A second run: the first run's deliveries that still hold their lease.
  local pos = 2
  while pos <= #seen do
    local a, len, rest = string.match(seen, '^(%d+):(%d+):()', pos)
    if not a then break end
    local id = string.sub(seen, rest, rest + tonumber(len) - 1)
    pos = rest + tonumber(len)
    claimed = claimed + 1
    local deadline = redis.call('ZSCORE', KEYS[3], id)
    local attempt, jdue = string.match(redis.call('HGET', KEYS[6], id) or '', '^(%d+):(%d+)$')
    if deadline and attempt == a then
      deliver(id, redis.call('HGET', KEYS[5], id), tonumber(attempt), tonumber(jdue), tonumber(deadline))
    end
  end
elseif n > 0 then
  local top = redis.call('ZPOPMIN', KEYS[2], n)
  if #top > 0 then
    local ids = {}
    for i = 1, #top, 2 do ids[#ids + 1] = top[i] end
    local metas = redis.call('HMGET', KEYS[6], unpack(ids))
    local payloads = redis.call('HMGET', KEYS[5], unpack(ids))
    local deadline = now + tonumber(ARGV[3])
    local sdeadline = string.format('%d', deadline)
    local hset, zadd, rcpt = {}, {}, {'t'}
    for i, id in ipairs(ids) do
      local attempt, jdue = string.match(metas[i] or '0:0', '^(%d+):(%d+)$')
      attempt = (tonumber(attempt) or 0) + 1
      jdue = tonumber(jdue) or tonumber(top[2 * i])
      hset[#hset + 1] = id
      hset[#hset + 1] = string.format('%d:%d', attempt, jdue)
      zadd[#zadd + 1] = sdeadline
      zadd[#zadd + 1] = id
      rcpt[#rcpt + 1] = string.format('%d:%d:', attempt, #id) .. id
      deliver(id, payloads[i], attempt, jdue, deadline)
    end
    redis.call('HSET', KEYS[6], unpack(hset))
    redis.call('ZADD', KEYS[3], unpack(zadd))
    setReceipt(KEYS[8], now, ARGV[4], table.concat(rcpt))
    claimed = #ids
  end
end

-- 4. Plan.
local function head(key)
  local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if h[2] then return tonumber(h[2]) end
  return -1
end
local ready = redis.call('ZCARD', KEYS[2])
local nextDue, nextDeadline = head(KEYS[1]), head(KEYS[3])
local plan = now + poll
for _, t in ipairs({nextDue, nextDeadline}) do
  if t >= 0 and t < plan then plan = math.max(t, now) end
end
local wake, isWaker = plan, 0
if ready > 0 then wake = now end
local wplan, wuntil, owner = string.match(redis.call('GET', KEYS[10]) or '', '^(%d+):(%d+):(.*)$')
local live = wplan and tonumber(wuntil) > now
if runner ~= '' and n - claimed + tonumber(ARGV[8]) > 0 then
  if not live or owner == runner or tonumber(wplan) > plan then
    if not (live and owner == runner and tonumber(wplan) == plan) then
      redis.call('SET', KEYS[10], string.format('%d:%d:', plan, plan + poll) .. runner,
        'PX', math.ceil((plan + poll - now) / 1000) + 1000)
    end
    isWaker = 1
  elseif ready == 0 then
    wake = tonumber(wuntil)
  end
elseif live and owner == runner and runner ~= '' then
  redis.call('DEL', KEYS[10])
  redis.call('PUBLISH', channel, string.format('%d', plan))
end
if ready > 0 and #moved + requeued > 0 then redis.call('PUBLISH', channel, snow) end

local reply = {acked, #moved, requeued, dead, ready, nextDue, nextDeadline, now, wake, isWaker}
for _, v in ipairs(out) do reply[#reply + 1] = v end
return reply
