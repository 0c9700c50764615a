-- sem_acquire.lua: one attempt to take a permit of a Semaphore.
-- KEYS[1] holders (zset: owner scored by lease deadline µs)
-- KEYS[2] holds (hash: 'c'..owner hold count, 't'..owner token, 'k'..owner
--         call log of that holding (with Owner), 'r' the call that last
--         ended a holding)
-- KEYS[3] fence: the last token handed out (no TTL: it outlives the permits)
-- KEYS[4] waiters (zset: owner scored by place in the queue)
-- KEYS[5] waiter deadlines (hash: owner -> µs; a waiter that stops retrying
--         drops out)
-- KEYS[6] this call's tombstone (set by sem_cancel.lua when the caller gave up)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] ttl µs; ARGV[4] permits;
-- ARGV[5] fair (1/0); ARGV[6] waiting (1: join or stay in the queue on
-- failure); ARGV[7] waiter lease µs; ARGV[8] call id (the same in every
-- resend of this call); ARGV[9] reentrant (1/0: the owner was given with Owner)
-- reply: {1, token, 0} acquired; {0, wait_hint_us, place} not acquired, where
-- wait_hint_us is when the first permit's lease ends (0: wait for a wake-up;
-- -1: refused, the caller gave up on this call) and place the caller's place
-- in the queue (0 when not waiting).
--
-- Safe to run twice, as acquire.lua: without Owner a live holding by owner
-- can only come from an earlier run of this call, and gets the same token;
-- with Owner the call log of a holding records the token each acquiring call
-- got, so a resend of a logged call whose holding is live gets the same
-- token and adds no level. A tombstone refuses the call.
--
-- Rules. A holder re-enters at once, keeping its one permit. Otherwise a
-- caller is admitted while fewer than permits owners hold one and, with fair,
-- fewer waiters are ahead of it than permits are free. Places are unique and
-- increasing (the largest place queued + 1), so FIFO does not depend on clock
-- resolution. Times are µs, exact in Lua's doubles (below 2^53) and passed to
-- Redis through '%d'.
if redis.call('EXISTS', KEYS[6]) == 1 then return {0, -1, 0} end
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, ttl, permits = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease = tonumber(ARGV[7])
local call, reentrant = ARGV[8], ARGV[9] == '1'
local function int(x) return string.format('%d', x) end

-- logged: the value the call log records for call id, or nil.
local function logged(log, id)
  if not log then return nil end
  local _, e = string.find(log, ';' .. id .. '=', 1, true)
  if not e then return nil end
  return tonumber(string.match(log, '^-?%d+', e + 1))
end
-- record: the log with ";id=v" appended, keeping the last 8 entries.
local function record(log, id, v)
  log = (log or '') .. ';' .. id .. '=' .. string.format('%d', v)
  local _, n = string.gsub(log, ';', '')
  if n > 8 then log = string.sub(log, (string.find(log, ';', 2, true))) end
  return log
end

-- keep: make key live at least ms milliseconds (TTLs only collect garbage).
local function keep(key, ms)
  local pt = redis.call('PTTL', key)
  if pt ~= -2 and pt < ms then redis.call('PEXPIRE', key, ms) end
end

-- Forget holders whose lease ended, at most 100 per call. Nothing below
-- relies on it: live holders are those whose deadline is after now.
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, 100)
for _, o in ipairs(gone) do
  redis.call('ZREM', KEYS[1], o)
  redis.call('HDEL', KEYS[2], 'c' .. o, 't' .. o, 'k' .. o)
end

local place = tonumber(redis.call('ZSCORE', KEYS[4], owner) or '0')
if place ~= 0 and ARGV[6] == '1' then
  -- Still waiting: renew the waiter lease before anyone judges it.
  redis.call('HSET', KEYS[5], owner, int(now + lease))
end

local function done(token)
  if place ~= 0 then
    redis.call('ZREM', KEYS[4], owner)
    redis.call('HDEL', KEYS[5], owner)
  end
  return {1, token, 0}
end

local function fail(hint)
  if ARGV[6] ~= '1' then return {0, hint, place} end
  if place == 0 then
    local tail = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    place = 1
    if tail[2] then place = tonumber(tail[2]) + 1 end
    redis.call('ZADD', KEYS[4], int(place), owner)
    redis.call('HSET', KEYS[5], owner, int(now + lease))
  end
  local ms = math.ceil(lease / 1000) + 1000
  keep(KEYS[4], ms)
  keep(KEYS[5], ms)
  return {0, hint, place}
end

if tonumber(redis.call('ZSCORE', KEYS[1], owner) or '0') > now then
  local r = redis.call('HMGET', KEYS[2], 't' .. owner, 'k' .. owner)
  local token = tonumber(r[1] or '0')
  if not reentrant or logged(r[2], call) == token then return done(token) end
  redis.call('HINCRBY', KEYS[2], 'c' .. owner, 1)
  redis.call('HSET', KEYS[2], 'k' .. owner, record(r[2], call, token))
  return done(token)
end
local held = redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
if held >= permits then
  local firstEnd = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return fail(tonumber(firstEnd[2]) - now)
end
if ARGV[5] == '1' then
  -- Drop dead waiters from the head of the queue, at most 100 per call; dead
  -- ones further back count as waiting until they reach the head.
  local head = redis.call('ZRANGE', KEYS[4], 0, 99)
  for _, w in ipairs(head) do
    if tonumber(redis.call('HGET', KEYS[5], w) or '0') > now then break end
    redis.call('ZREM', KEYS[4], w)
    redis.call('HDEL', KEYS[5], w)
  end
  local before
  if place == 0 then
    before = redis.call('ZCARD', KEYS[4])
  else
    before = redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. int(place))
  end
  if before >= permits - held then return fail(0) end
end
-- Tokens follow the server clock when they can: after Redis lost the fence,
-- the new token (now) is still above every token handed out before, as long
-- as fewer than one holding per µs was started on average.
local token = tonumber(redis.call('GET', KEYS[3]) or '0') + 1
if token < now then token = now end
redis.call('SET', KEYS[3], int(token))
redis.call('ZADD', KEYS[1], int(now + ttl), owner)
redis.call('HSET', KEYS[2], 'c' .. owner, 1, 't' .. owner, int(token))
if reentrant then redis.call('HSET', KEYS[2], 'k' .. owner, record(nil, call, token)) end
keep(KEYS[1], math.ceil(ttl / 1000))
keep(KEYS[2], math.ceil(ttl / 1000))
return done(token)
