-- sem_acquire.lua: one attempt to take a permit of a Semaphore.
-- KEYS[1] lock hash, without a TTL (it carries the fence): the permits as
--         shared holdings ('h'..owner deadline, 't'..owner, 'c'..owner,
--         'l'..owner, n, m, u: see sweep in common.lua); f the fence, the
--         last token handed out; q
--         the queue flag (a waiter was queued: see queued); 'x'..call the
--         tombstones of calls their callers gave up on (set by sem_cancel.lua)
-- KEYS[2] the fence of the 0.9 layout (a key of its own), read and deleted
--         by the first acquisition that finds no f
-- KEYS[3] waiters (zset: owner scored by place in the queue)
-- KEYS[4] waiter deadlines (hash: owner -> µs; a waiter that stops retrying
--         drops out)
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
-- resolution.
--
-- Cost. One HMGET reads everything an attempt needs; a free permit is then
-- taken with one HSET (holding, count and fence). The holders' deadlines are
-- looked at only when m says one may have passed, and the queue only when q
-- says a waiter was queued.
local now = clock(ARGV[1])
local owner, ttl, permits = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease = tonumber(ARGV[7])
local call, reentrant = ARGV[8], ARGV[9] == '1'
local h = redis.call('HMGET', KEYS[1], 'f', 'x' .. call, 'q', 'n', 'm', 'h' .. owner, 'l' .. owner)
if h[2] then return {0, -1, 0} end
local s = sharedState(h[4], h[5], h[6], h[7])

-- Only a waiting attempt, or an owner that other calls share (Owner), can
-- have a place, and only when a waiter was queued: the first attempt of a
-- call without Owner never queued.
local place = 0
if (ARGV[6] == '1' or reentrant) and h[3] then
  place = tonumber(redis.call('ZSCORE', KEYS[3], owner) or '0')
end
if place ~= 0 and ARGV[6] == '1' then
  -- Still waiting: renew the waiter lease before anyone judges it.
  redis.call('HSET', KEYS[4], owner, int(now + lease))
end

local function done(token)
  if place ~= 0 then unqueue(KEYS[3], KEYS[4], owner, '') end
  return {1, token, 0}
end

local function fail(hint)
  if ARGV[6] ~= '1' then return {0, hint, place} end
  if place == 0 then
    local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    place = 1
    if tail[2] then place = tonumber(tail[2]) + 1 end
    redis.call('HSET', KEYS[1], 'q', 1) -- see queued
    redis.call('ZADD', KEYS[3], int(place), owner)
    redis.call('HSET', KEYS[4], owner, int(now + lease))
  end
  local ms = math.ceil(lease / 1000) + 1000
  keep(KEYS[3], ms)
  keep(KEYS[4], ms)
  return {0, hint, place}
end

if s.d and s.d > now then return done(sharedReenter(KEYS[1], owner, s, call, reentrant)) end
local held = sharedLive(KEYS[1], s, now)
if held >= permits then
  -- Every holder sharedLive counted is live: m is the first to end.
  return fail(s.m - now)
end
if ARGV[5] == '1' and queued(KEYS[1], h[3], KEYS[3]) then
  -- Drop dead waiters from the head of the queue, at most 100 per call; dead
  -- ones further back count as waiting until they reach the head.
  firstLive(KEYS[3], KEYS[4], now)
  local before
  if place == 0 then
    before = redis.call('ZCARD', KEYS[3])
  else
    before = redis.call('ZCOUNT', KEYS[3], '-inf', '(' .. int(place))
  end
  if before >= permits - held then return fail(0) end
end
local token = nextToken(KEYS[1], KEYS[2], h[1], now)
sharedTake(KEYS[1], owner, s, token, call, reentrant, now, ttl)
return done(token)
