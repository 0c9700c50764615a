-- take.lua: one step of a consumer, in one call: ack a delivery (optional),
-- take back ended leases, lease up to n due jobs, and say when to look next.
--
--   1. Ack: for each (id, attempt) of ARGV[12...], delete the job if the
--      delivery of that attempt holds its lease (its handler returned nil).
--      Its receipt is KEYS[9 + i] for the i-th.
--   2. Take back the jobs whose lease ended (a consumer crashed or stalled),
--      at most ARGV[5] per call: to scheduled, due at the lease deadline, or
--      to dead when they used their attempts. With ARGV[11] = "1", also move
--      back to scheduled, at most ARGV[5], the jobs that an older version of
--      this package moved to its ready set (KEYS[2]), which this one does not
--      use.
--   3. Claim: take up to n due jobs from scheduled, due first (ties: the
--      smallest id), and lease each: it moves to inflight until now +
--      visibility, and its attempt count goes up by one. The attempt number is
--      the lease's fencing token: extend, ack and retry act only for the
--      delivery that holds it. The deliveries' call IDs are this take's call ID
--      followed by "." and their place in the reply (0, 1, ...); their ack or
--      retry leaves its receipt under that.
--   4. Plan: the caller should look again at wake_us: at once while due jobs
--      are left, else at the earliest due time or lease deadline, and after
--      ARGV[9] µs (MaxPoll) at the latest. One idle consumer is the waker
--      (KEYS[9]: "<until_us>:<runner>", live while until_us > now): it wakes at
--      its plan; the other idle consumers sleep until its until_us, unless a
--      message wakes them, so that a due time wakes one consumer, not all. A
--      consumer with a slot free after this call (n - claimed + ARGV[8] > 0)
--      and a runner ID becomes the waker when there is none, and the waker
--      stays it, its until_us moved to now + MaxPoll once half of that is
--      left (so that it writes at most twice per MaxPoll); a waker without a
--      free slot left gives the role up and publishes its plan for the others.
--      A consumer without a free slot that leaves due jobs publishes "now" to
--      the waker.
--
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] an older version's ready set (zset: id -> due µs);
-- KEYS[3] inflight (zset: id -> lease deadline µs); KEYS[4] dead (zset: id -> µs of death);
-- KEYS[5] payloads (hash); KEYS[6] meta (hash: id -> "attempt:due_us");
-- KEYS[7] calls (hash, see enqueue.lua); KEYS[8] this take's receipt (string);
-- KEYS[9] the waker (string); KEYS[10...] the acked deliveries' receipts (strings)
-- ARGV[1] now µs or "" for TIME; ARGV[2] n, how many jobs to lease at most (0: none);
-- ARGV[3] visibility µs; ARGV[4] receipt lifetime µs; ARGV[5] batch size;
-- ARGV[6] max attempts; ARGV[7] the caller's runner ID, "" when it cannot be woken by
-- a message (never the waker); ARGV[8] the caller's free slots besides n;
-- ARGV[9] MaxPoll µs; ARGV[10] the queue's channel; ARGV[11] "1" to move an older
-- version's ready jobs; ARGV[12...] id, attempt of each delivery to ack
-- reply: {acks, requeued, dead, more, next_due_us, next_deadline_us, now_us,
--   wake_us, waker, acked..., id, payload, attempt, due_us, deadline_us, id, payload, ...}
-- acks: how many acks follow the header, one per ack asked: 1 acked, 0 the
-- lease is lost (nothing changed);
-- more: 1 when due jobs are left; next_due_us / next_deadline_us: the head of
-- scheduled / inflight after the call, -1 when empty; waker: 1 when the
-- caller is the waker.
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
-- Safe to run twice: an ack finds its receipt 'a' and answers 1; the claim
-- finds its receipt and returns the same deliveries, those that still hold
-- their lease, leasing nothing more; taking back ended leases does the next
-- part of the same work, if any.
local now = clock(ARGV[1])
local snow = string.format('%d', now)
local n = tonumber(ARGV[2])
local batch = tonumber(ARGV[5])
local runner = ARGV[7]
local poll = tonumber(ARGV[9])
local channel = ARGV[10]

-- 1. Ack.
local acked = {}
for i = 12, #ARGV, 2 do
  local id, rkey = ARGV[i], KEYS[9 + (i - 10) / 2]
  if receipt(rkey, now) == 'a' then
    acked[#acked + 1] = 1
  elseif string.match(redis.call('HGET', KEYS[6], id) or '', '^(%d+):') == ARGV[i + 1] and
      redis.call('ZREM', KEYS[3], id) == 1 then
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
    redis.call('HDEL', KEYS[7], id)
    setReceipt(rkey, now, ARGV[4], 'a')
    acked[#acked + 1] = 1
  else
    acked[#acked + 1] = 0
  end
end

-- 2. Ended leases. Scores come back as strings that Redis formats exactly
-- (%.17g), so they are passed on unchanged.
local ihead = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local requeued, dead = 0, 0
if ihead[2] and tonumber(ihead[2]) <= now then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', snow, 'WITHSCORES', 'LIMIT', 0, batch)
  local maxAttempts = tonumber(ARGV[6])
  local back = {}
  for i = 1, #expired, 2 do
    local id, deadline = expired[i], expired[i + 1]
    local attempt = tonumber(string.match(redis.call('HGET', KEYS[6], id) or '0:0', '^(%d+):')) or 0
    if attempt >= maxAttempts then
      redis.call('ZADD', KEYS[4], snow, id)
      dead = dead + 1
    else
      redis.call('ZADD', KEYS[1], deadline, id)
      redis.call('HSET', KEYS[6], id, string.format('%d:', attempt) .. deadline)
      requeued = requeued + 1
    end
    back[#back + 1] = id
  end
  redis.call('ZREM', KEYS[3], unpack(back))
  ihead = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
end
local nextDeadline = tonumber(ihead[2]) or -1
if ARGV[11] == '1' then
  local old = redis.call('ZRANGE', KEYS[2], 0, batch - 1, 'WITHSCORES')
  if #old > 0 then
    local args, ids = {}, {}
    for i = 1, #old, 2 do
      args[#args + 1] = old[i + 1]
      args[#args + 1] = old[i]
      ids[#ids + 1] = old[i]
    end
    redis.call('ZADD', KEYS[1], unpack(args))
    redis.call('ZREM', KEYS[2], unpack(ids))
  end
end

-- 3. Claim.
local out = {}
local function deliver(id, payload, attempt, jdue, deadline)
  out[#out + 1] = id
  out[#out + 1] = payload or ''
  out[#out + 1] = attempt
  out[#out + 1] = jdue
  out[#out + 1] = deadline
end
local seen = n > 0 and receipt(KEYS[8], now)
local claimed, nextDue, more = 0, -1, 0
if n > 0 and not seen then
  -- Up to n due jobs, due first, are leased (only due ones are read: n may
  -- be far more than are due).
  local top = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', snow, 'WITHSCORES', 'LIMIT', 0, n)
  local ids = {}
  for i = 1, #top, 2 do
    ids[#ids + 1] = top[i]
  end
  if #ids > 0 then
    redis.call('ZREM', KEYS[1], unpack(ids))
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
    if nextDeadline < 0 or deadline < nextDeadline then nextDeadline = deadline end
  end
elseif seen then
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
end
-- The head of scheduled, after what this call leased.
local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if h[2] then
  nextDue = tonumber(h[2])
  if nextDue <= now then more = 1 end
end

-- 4. Plan.
local plan = now + poll
for _, t in ipairs({nextDue, nextDeadline}) do
  if t >= 0 and t < plan then plan = math.max(t, now) end
end
local wake, isWaker = plan, 0
if more == 1 then wake = now end
local untl, owner = string.match(redis.call('GET', KEYS[9]) or '', '^(%d+):(.*)$')
local live = untl and tonumber(untl) > now
if runner ~= '' and n - claimed + tonumber(ARGV[8]) > 0 then
  if not live or owner == runner then
    if not live or tonumber(untl) - now < poll / 2 then
      redis.call('SET', KEYS[9], string.format('%d:', now + poll) .. runner,
        'PX', math.ceil(poll / 1000) + 1000)
    end
    isWaker = 1
  elseif more == 0 then
    wake = tonumber(untl)
  end
elseif live and runner ~= '' and owner == runner then
  redis.call('DEL', KEYS[9])
  redis.call('PUBLISH', channel, string.format('%d', plan))
elseif live and more == 1 then
  redis.call('PUBLISH', channel .. ':' .. owner, snow)
end

local reply = {#acked, requeued, dead, more, nextDue, nextDeadline, now, wake, isWaker}
for _, v in ipairs(acked) do reply[#reply + 1] = v end
for _, v in ipairs(out) do reply[#reply + 1] = v end
return reply
