-- acquire.lua: one attempt to take a mutex.
-- KEYS[1] lock hash {o owner, c hold count, t token, d deadline µs, k call log
--         (with Owner), r the call that last ended a holding, f fence: the last
--         token handed out}; no TTL, so that the fence outlives every holding:
--         a holding is live while d is after now
-- KEYS[2] the fence of releases before 0.10, read (and deleted) by the first
--         acquisition that finds no f
-- KEYS[3] waiter queue (zset: owner scored by arrival µs)
-- KEYS[4] waiter deadlines (hash: owner -> µs; a waiter that stops retrying drops out)
-- KEYS[5] unused (the tombstone of 0.9; a call's tombstone is now field
--         'x'..call of the lock hash, set by cancel.lua when the caller gave up)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] ttl µs; ARGV[4] fair (1/0);
-- ARGV[5] waiting (1: join or stay in the queue on failure); ARGV[6] waiter lease µs;
-- ARGV[7] call id (the same in every resend of this call); ARGV[8] reentrant (1/0:
-- the owner was given with Owner)
-- reply: {1, token} acquired; {0, wait_hint_us} not acquired (0: free but not
-- this waiter's turn; -1: refused, the caller gave up on this call).
--
-- Safe to run twice. Without Owner the owner id is this Lock call's own, so
-- a live holding by owner can only come from an earlier run of this call: it
-- gets the same token, and no hold level is added. With Owner, the call log k
-- (";id=value" entries, the last 8 calls that changed the lock, kept across
-- that owner's holdings) records the token each acquiring call got: a resend
-- of a logged call whose holding is live gets the same token and adds no
-- level. A tombstone means cancel.lua already ran for this call: refused,
-- nothing changes (no token is burnt). Field q of the hash says that a
-- waiter was queued (see queued in common.lua).
local now = clock(ARGV[1])
local owner, ttl, call = ARGV[2], tonumber(ARGV[3]), ARGV[7]
local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k', 'f', 'x' .. call)
if h[7] then return {0, -1} end

local function enqueue()
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[1], 'q', 1) -- see queued
    redis.call('ZADD', KEYS[3], 'NX', int(now), owner)
    redis.call('HSET', KEYS[4], owner, int(now + tonumber(ARGV[6])))
    redis.call('PEXPIRE', KEYS[3], math.ceil(tonumber(ARGV[6]) / 1000) + 1000)
    redis.call('PEXPIRE', KEYS[4], math.ceil(tonumber(ARGV[6]) / 1000) + 1000)
  end
end

if h[1] and tonumber(h[4]) > now then
  if h[1] == owner then return {1, reenter(KEYS[1], h, call, ARGV[8] == '1')} end
  enqueue()
  return {0, tonumber(h[4]) - now}
end
-- Fair: the longest live waiter goes first (waiters that stopped retrying
-- leave the head, at most 100 per call).
if ARGV[4] == '1' then
  local head = firstLive(KEYS[3], KEYS[4], now)
  if head and head ~= owner then
    enqueue()
    return {0, 0}
  end
end
-- The next fencing token: one HSET writes the holding and the fence.
local token = nextToken(KEYS[1], KEYS[2], h[6], now)
local log = ''
if ARGV[8] == '1' then log = record(h[5], call, token) end
redis.call('HSET', KEYS[1], 'o', owner, 'c', 1, 't', int(token), 'd', int(now + ttl), 'k', log, 'f', int(token))
-- Only a waiting call, or an owner that other calls share (Owner) or whose
-- queue decides (Fair), can have queued: a first attempt of a Lock call
-- without Owner never did, and skips the queue.
if ARGV[5] == '1' or ARGV[4] == '1' or ARGV[8] == '1' then unqueue(KEYS[3], KEYS[4], owner, '') end
return {1, token}
