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
if buried(KEYS[8]) then return {0, -1, 0} end
local now = clock(ARGV[1])
local side, owner, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local lease = tonumber(ARGV[7])
local call, reentrant = ARGV[8], ARGV[9] == '1'

sharedForget(KEYS[3], KEYS[4], now)

local myq = KEYS[5]
if side == 'w' then myq = KEYS[6] end
-- Only a waiting attempt, or an owner that other calls share (Owner), can
-- have a place: the first attempt of a call without Owner never queued.
local place = 0
if ARGV[6] == '1' or reentrant then
  place = tonumber(redis.call('ZSCORE', myq, owner) or '0')
end
if place ~= 0 and ARGV[6] == '1' then
  -- Still waiting: renew the waiter lease before anyone judges it.
  redis.call('HSET', KEYS[7], side .. owner, int(now + lease))
end

-- ahead: the longest live waiter of queue q (side s) waits ahead of the
-- caller (see rwFirst).
local function ahead(q, s)
  local p = rwFirst(q, KEYS[7], s, now)
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
  if place ~= 0 then unqueue(myq, KEYS[7], owner, side) end
  return {1, token, 0}
end

local w = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k')
local wlive = w[1] and tonumber(w[4]) > now
local reading = sharedHeld(KEYS[3], owner, now)

if side == 'r' then
  if reading then return done(sharedReenter(KEYS[4], owner, call, reentrant)) end
  if wlive then
    if w[1] ~= owner then return fail(tonumber(w[4]) - now) end
  elseif ahead(KEYS[6], 'w') then
    return fail(0)
  end
  local token = mint(KEYS[2], now)
  sharedTake(KEYS[3], KEYS[4], owner, token, call, reentrant, now, ttl)
  return done(token)
end

if wlive then
  if w[1] == owner then return done(reenter(KEYS[1], w, call, reentrant)) end
  return fail(tonumber(w[4]) - now)
end
local others = redis.call('ZCOUNT', KEYS[3], '(' .. int(now), '+inf')
if reading then others = others - 1 end
if others > 0 then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  return fail(tonumber(last[2]) - now)
end
if ARGV[5] == '1' and not reading and (ahead(KEYS[5], 'r') or ahead(KEYS[6], 'w')) then
  return fail(0)
end
local token = mint(KEYS[2], now)
local log = ''
if reentrant then log = record(w[5], call, token) end
redis.call('HSET', KEYS[1], 'o', owner, 'c', 1, 't', int(token), 'd', int(now + ttl), 'k', log)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
return done(token)
