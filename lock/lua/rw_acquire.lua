-- rw_acquire.lua: one attempt to take the read or the write side of an RWMutex.
-- KEYS[1] writer (hash: o owner, c hold count, t token, d lease deadline µs,
--         k call log of the write side (with Owner), r the call that last
--         ended a write holding)
-- KEYS[2] fence: the last token handed out, to readers and writers alike (no
--         TTL: it outlives the lock)
-- KEYS[3] readers (zset: owner scored by lease deadline µs)
-- KEYS[4] reader holds (hash: 'c'..owner hold count, 't'..owner token,
--         'k'..owner call log of that holding (with Owner), 'r' the call
--         that last ended a read holding)
-- KEYS[5] waiting readers (zset: owner scored by place in the queue)
-- KEYS[6] waiting writers (zset: owner scored by place in the queue)
-- KEYS[7] waiter deadlines (hash: side..owner -> µs; a waiter that stops
--         retrying drops out)
-- KEYS[8] this call's tombstone (set by rw_cancel.lua when the caller gave up)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] ttl µs; ARGV[5] fair (1/0); ARGV[6] waiting (1: join or stay in the
-- queue on failure); ARGV[7] waiter lease µs; ARGV[8] call id (the same in
-- every resend of this call); ARGV[9] reentrant (1/0: the owner was given
-- with Owner)
-- reply: {1, token, 0} acquired; {0, wait_hint_us, place} not acquired, where
-- wait_hint_us is when the blocking lease ends (0: wait for a wake-up; -1:
-- refused, the caller gave up on this call) and place the caller's place in
-- the queue (0 when not waiting).
--
-- Safe to run twice, as acquire.lua: without Owner a live holding by owner
-- can only come from an earlier run of this call, and gets the same token;
-- with Owner the call logs record the token each acquiring call got, so a
-- resend of a logged call whose holding is live gets the same token and adds
-- no level. A tombstone refuses the call.
--
-- Rules. A reader is admitted unless another owner holds the write side or a
-- writer waits ahead of it (a newcomer is behind every waiter): once a writer
-- waits, new readers queue behind it. A writer is admitted when no other
-- owner holds either side and, with fair, no waiter is ahead of it. An owner
-- never waits for itself: it re-enters the side it holds, the writer may also
-- read, and a reader may take the write side as soon as no other owner holds
-- the lock. Places are unique and increasing (the largest place queued + 1),
-- so FIFO does not depend on clock resolution. Times are µs, exact in Lua's
-- doubles (below 2^53) and passed to Redis through '%d'.
if redis.call('EXISTS', KEYS[8]) == 1 then return {0, -1, 0} end
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local side, owner, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
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

-- Forget readers whose lease ended, at most 100 per call. Nothing below
-- relies on it: live readers are those whose deadline is after now.
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', int(now), 'LIMIT', 0, 100)
for _, o in ipairs(gone) do
  redis.call('ZREM', KEYS[3], o)
  redis.call('HDEL', KEYS[4], 'c' .. o, 't' .. o, 'k' .. o)
end

local myq = KEYS[5]
if side == 'w' then myq = KEYS[6] end
local place = tonumber(redis.call('ZSCORE', myq, owner) or '0')
if place ~= 0 and ARGV[6] == '1' then
  -- Still waiting: renew the waiter lease before anyone judges it.
  redis.call('HSET', KEYS[7], side .. owner, int(now + lease))
end

-- first: the place of the longest live waiter of queue q (side s), dropping
-- dead ones from its head, at most 100 per call; past those, the next one
-- counts as live.
local function first(q, s)
  local head = redis.call('ZRANGE', q, 0, 99, 'WITHSCORES')
  for i = 1, #head, 2 do
    if tonumber(redis.call('HGET', KEYS[7], s .. head[i]) or '0') > now then
      return tonumber(head[i + 1])
    end
    redis.call('ZREM', q, head[i])
    redis.call('HDEL', KEYS[7], s .. head[i])
  end
  local rest = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if rest[2] then return tonumber(rest[2]) end
  return nil
end

-- ahead: a waiter at place p waits ahead of the caller.
local function ahead(p)
  return p ~= nil and (place == 0 or p < place)
end

local function fail(hint)
  if ARGV[6] ~= '1' then return {0, hint, place} end
  if place == 0 then
    local last = 0
    for _, q in ipairs({KEYS[5], KEYS[6]}) do
      local tail = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
      if tail[2] and tonumber(tail[2]) > last then last = tonumber(tail[2]) end
    end
    place = last + 1
    redis.call('ZADD', myq, int(place), owner)
    redis.call('HSET', KEYS[7], side .. owner, int(now + lease))
  end
  local ms = math.ceil(lease / 1000) + 1000
  keep(myq, ms)
  keep(KEYS[7], ms)
  return {0, hint, place}
end

local function done(token)
  if place ~= 0 then
    redis.call('ZREM', myq, owner)
    redis.call('HDEL', KEYS[7], side .. owner)
  end
  return {1, token, 0}
end

-- Tokens follow the server clock when they can: after Redis lost the fence,
-- the new token (now) is still above every token handed out before, as long
-- as fewer than one holding per µs was started on average.
local function newToken()
  local token = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
  if token < now then token = now end
  redis.call('SET', KEYS[2], int(token))
  return token
end

local w = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k')
local wlive = w[1] and tonumber(w[4]) > now
local reading = tonumber(redis.call('ZSCORE', KEYS[3], owner) or '0') > now
local ms = math.ceil(ttl / 1000)

if side == 'r' then
  if reading then
    local r = redis.call('HMGET', KEYS[4], 't' .. owner, 'k' .. owner)
    local token = tonumber(r[1] or '0')
    if not reentrant or logged(r[2], call) == token then return done(token) end
    redis.call('HINCRBY', KEYS[4], 'c' .. owner, 1)
    redis.call('HSET', KEYS[4], 'k' .. owner, record(r[2], call, token))
    return done(token)
  end
  if wlive then
    if w[1] ~= owner then return fail(tonumber(w[4]) - now) end
  elseif ahead(first(KEYS[6], 'w')) then
    return fail(0)
  end
  local token = newToken()
  redis.call('ZADD', KEYS[3], int(now + ttl), owner)
  redis.call('HSET', KEYS[4], 'c' .. owner, 1, 't' .. owner, int(token))
  if reentrant then redis.call('HSET', KEYS[4], 'k' .. owner, record(nil, call, token)) end
  keep(KEYS[3], ms)
  keep(KEYS[4], ms)
  return done(token)
end

if wlive then
  if w[1] == owner then
    local token = tonumber(w[3])
    if not reentrant or logged(w[5], call) == token then return done(token) end
    redis.call('HINCRBY', KEYS[1], 'c', 1)
    redis.call('HSET', KEYS[1], 'k', record(w[5], call, token))
    return done(token)
  end
  return fail(tonumber(w[4]) - now)
end
local others = redis.call('ZCOUNT', KEYS[3], '(' .. int(now), '+inf')
if reading then others = others - 1 end
if others > 0 then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  return fail(tonumber(last[2]) - now)
end
if ARGV[5] == '1' and not reading and (ahead(first(KEYS[5], 'r')) or ahead(first(KEYS[6], 'w'))) then
  return fail(0)
end
local token = newToken()
local log = ''
if reentrant then log = record(w[5], call, token) end
redis.call('HSET', KEYS[1], 'o', owner, 'c', 1, 't', int(token), 'd', int(now + ttl), 'k', log)
redis.call('PEXPIRE', KEYS[1], ms)
return done(token)
