-- release.lua: drop one hold level of a mutex, by its owner only.
-- KEYS[1] lock hash; KEYS[3] waiter queue; KEYS[4] waiter deadlines (KEYS[2] unused)
-- ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] channel to wake the next waiter on;
-- ARGV[4] call id (the same in every resend of this call)
-- reply: -1 not held (expired, taken over or gone); else the hold count left.
-- On the last level it ends the holding and publishes the longest live waiter's
-- owner id (or "" when none live), so only that waiter retries: no thundering
-- herd; with nobody queued it publishes nothing.
--
-- Safe to run twice. The release that ends a holding leaves its call id in
-- r, which stays in the hash (which has no TTL) until the next such release:
-- a resend answers 0 again. With Owner, the
-- call log k (see acquire.lua) records the count each release left, and a
-- resend of a logged call gets that answer without releasing another level.
local now = clock(ARGV[1])
local left, ended, h = release(KEYS[1], ARGV[2], ARGV[4], now)
if not ended then return left end
-- A waiter queues (acquire.lua) after it has subscribed and before it
-- waits: with nobody queued, nobody is waiting for this message.
if queued(KEYS[1], h[6], KEYS[3]) then
  redis.call('PUBLISH', ARGV[3], firstLive(KEYS[3], KEYS[4], now) or '')
end
return 0
