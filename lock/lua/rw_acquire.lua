-- rw_acquire.lua: one attempt to take the read or the write side of an RWMutex.
-- KEYS[1] lock hash, without a TTL (it carries the fence): the write side's
--         holding as the mutex's (o owner, c hold count, t token, d lease
--         deadline µs, k call log (with Owner), r the call that last ended a
--         write holding); the readers as shared holdings ('h'..owner deadline,
--         't'..owner, 'c'..owner, 'l'..owner, n, m, u: see sweep in
--         common.lua); f the fence, the
--         last token handed out to readers and writers alike; q the queue flag
--         (a waiter was queued: see queued); 'x'..call the tombstones of calls
--         their callers gave up on (set by rw_cancel.lua)
-- KEYS[2] the fence of the 0.9 layout (a key of its own), read and deleted
--         by the first acquisition that finds no f
-- KEYS[3] waiting readers (zset: owner scored by place in the queue)
-- KEYS[4] waiting writers (zset: owner scored by place in the queue)
-- KEYS[5] waiter deadlines (hash: side..owner -> µs; a waiter that stops
--         retrying drops out)
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
-- so FIFO does not depend on clock resolution.
--
-- Cost. One HMGET reads everything an attempt needs; a free lock is then
-- taken with one HSET (holding and fence). The queues are looked at only
-- when q says a waiter was queued, and the readers' deadlines only when m
-- says one may have passed.
local now = clock(ARGV[1])
local side, owner, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local lease = tonumber(ARGV[7])
local call, reentrant = ARGV[8], ARGV[9] == '1'
local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k', 'f', 'x' .. call, 'q', 'n', 'm',
  'h' .. owner, 'l' .. owner)
if h[7] then return {0, -1, 0} end
local s = sharedState(h[9], h[10], h[11], h[12])

local myq = KEYS[3]
if side == 'w' then myq = KEYS[4] end
-- Only a waiting attempt, or an owner that other calls share (Owner), can
-- have a place, and only when a waiter was queued: the first attempt of a
-- call without Owner never queued.
local place = 0
if (ARGV[6] == '1' or reentrant) and h[8] then
  place = tonumber(redis.call('ZSCORE', myq, owner) or '0')
end
if place ~= 0 and ARGV[6] == '1' then
  -- Still waiting: renew the waiter lease before anyone judges it.
  redis.call('HSET', KEYS[5], side .. owner, int(now + lease))
end

-- waiting: whether a waiter was queued (the queues exist).
local waiters
local function waiting()
  if waiters == nil then waiters = queued(KEYS[1], h[8], KEYS[3], KEYS[4]) end
  return waiters
end

-- ahead: the longest live waiter of queue q (side w) waits ahead of the
-- caller (see rwFirst).
local function ahead(q, w)
  if not waiting() then return false end
  local p = rwFirst(q, KEYS[5], w, now)
  return p ~= nil and (place == 0 or p < place)
end

local function fail(hint)
  if ARGV[6] ~= '1' then return {0, hint, place} end
  if place == 0 then
    local last = 0
    for _, q in ipairs({KEYS[3], KEYS[4]}) do
      local tail = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
      if tail[2] and tonumber(tail[2]) > last then last = tonumber(tail[2]) end
    end
    place = last + 1
    redis.call('HSET', KEYS[1], 'q', 1) -- see queued
    redis.call('ZADD', myq, int(place), owner)
    redis.call('HSET', KEYS[5], side .. owner, int(now + lease))
  end
  local ms = math.ceil(lease / 1000) + 1000
  keep(myq, ms)
  keep(KEYS[5], ms)
  return {0, hint, place}
end

local function done(token)
  if place ~= 0 then unqueue(myq, KEYS[5], owner, side) end
  return {1, token, 0}
end

local wlive = h[1] and tonumber(h[4]) > now
local reading = s.d and s.d > now

if side == 'r' then
  if reading then return done(sharedReenter(KEYS[1], owner, s, call, reentrant)) end
  if wlive then
    if h[1] ~= owner then return fail(tonumber(h[4]) - now) end
  elseif ahead(KEYS[4], 'w') then
    return fail(0)
  end
  local token = nextToken(KEYS[1], KEYS[2], h[6], now)
  sharedTake(KEYS[1], owner, s, token, call, reentrant, now, ttl)
  return done(token)
end

if wlive then
  if h[1] == owner then return done(reenter(KEYS[1], h, call, reentrant)) end
  return fail(tonumber(h[4]) - now)
end
local others = sharedLive(KEYS[1], s, now)
if reading then others = others - 1 end
if others > 0 then
  -- Every reader sharedLive counted is live: m is the first to end.
  return fail(s.m - now)
end
if ARGV[5] == '1' and not reading and (ahead(KEYS[3], 'r') or ahead(KEYS[4], 'w')) then
  return fail(0)
end
local token = nextToken(KEYS[1], KEYS[2], h[6], now)
local log = ''
if reentrant then log = record(h[5], call, token) end
redis.call('HSET', KEYS[1], 'o', owner, 'c', 1, 't', int(token), 'd', int(now + ttl), 'k', log, 'f', int(token))
return done(token)
