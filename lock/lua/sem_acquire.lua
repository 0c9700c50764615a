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
if buried(KEYS[6]) then return {0, -1, 0} end
local now = clock(ARGV[1])
local owner, ttl, permits = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease = tonumber(ARGV[7])
local call, reentrant = ARGV[8], ARGV[9] == '1'

sharedForget(KEYS[1], KEYS[2], now)

-- Only a waiting attempt, or an owner that other calls share (Owner), can
-- have a place: the first attempt of a call without Owner never queued.
local place = 0
if ARGV[6] == '1' or reentrant then
  place = tonumber(redis.call('ZSCORE', KEYS[4], owner) or '0')
end
if place ~= 0 and ARGV[6] == '1' then
  -- Still waiting: renew the waiter lease before anyone judges it.
  redis.call('HSET', KEYS[5], owner, int(now + lease))
end

local function done(token)
  if place ~= 0 then unqueue(KEYS[4], KEYS[5], owner, '') end
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

if sharedHeld(KEYS[1], owner, now) then return done(sharedReenter(KEYS[2], owner, call, reentrant)) end
local held = redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
if held >= permits then
  local firstEnd = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return fail(tonumber(firstEnd[2]) - now)
end
if ARGV[5] == '1' then
  -- Drop dead waiters from the head of the queue, at most 100 per call; dead
  -- ones further back count as waiting until they reach the head.
  firstLive(KEYS[4], KEYS[5], now)
  local before
  if place == 0 then
    before = redis.call('ZCARD', KEYS[4])
  else
    before = redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. int(place))
  end
  if before >= permits - held then return fail(0) end
end
local token = mint(KEYS[3], now)
sharedTake(KEYS[1], KEYS[2], owner, token, call, reentrant, now, ttl)
return done(token)
