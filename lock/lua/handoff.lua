-- handoff.lua: a mutex's holder releases and, when no other process waits
-- in Redis, gives the lock to the next caller of its own process in the
-- same step (see lock/internal/cohort), so that the hand-off costs one round trip.
-- KEYS as acquire.lua (KEYS[5] unused: the receiver's tombstone is field
-- 'x'..ARGV[7] of the lock hash)
-- ARGV[1] now µs or ""; ARGV[2] owner releasing; ARGV[3] channel; ARGV[4]
-- call id of the release; ARGV[5] receiver's owner; ARGV[6] its ttl µs;
-- ARGV[7] call id of the receiver's acquire; ARGV[8] tokens to reserve: the
-- fence moves that many tokens ahead, the first of them the receiver's, the
-- others for passes in its process (lock/pass.go)
-- reply: {left, token}: left as release.lua (-1 not held; a resend of this
-- call answers 0); token the receiver's fencing token when it now holds the
-- lock, else 0 (it has to make an attempt of its own: other processes'
-- waiters were queued, and this step woke the first of them, or this is a
-- resend, or the release did not end the holding).
--
-- Safe to run twice: a resend finds r naming this call and answers {0, 0};
-- the receiver's own attempt then finds its holding (acquire.lua's resend
-- path, the same token).
local now = clock(ARGV[1])
local left, ended, h = release(KEYS[1], ARGV[2], ARGV[4], now)
if not ended then return {left, 0} end
if queued(KEYS[1], h[6], KEYS[3]) then
  redis.call('PUBLISH', ARGV[3], firstLive(KEYS[3], KEYS[4], now) or '')
  return {0, 0}
end
if redis.call('HEXISTS', KEYS[1], 'x' .. ARGV[7]) == 1 then return {0, 0} end
local token = nextToken(KEYS[1], KEYS[2], h[7], now)
redis.call('HSET', KEYS[1], 'o', ARGV[5], 'c', 1, 't', int(token), 'd', int(now + tonumber(ARGV[6])), 'k', '', 'f', int(token + tonumber(ARGV[8]) - 1))
return {0, token}
