-- sem_release.lua: drop one hold level of a Semaphore permit, by its holder
-- only; when the holding ends, wake the waiters the free permits can admit.
-- KEYS as sem_acquire.lua (KEYS[2] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits;
-- ARGV[4] channel to wake waiters on; ARGV[5] call id (the same in every
-- resend of this call)
-- reply: -1 not held (expired or gone); else the hold count left.
--
-- Safe to run twice. The release that ends a holding leaves its call id in
-- the lock hash's u until the next such release: a resend answers 0 again.
-- With Owner, the call log of a holding (see sem_acquire.lua) records the
-- count each release left, so a resend gets the same answer and releases
-- nothing more.
--
-- The wake-up message 's'..p lets the waiters up to place p retry: with f
-- permits free, the first f live waiters, so that no more wake than can go.
-- With nobody queued (the lock hash's flag q unset) a release publishes
-- nothing and looks at no queue.
local now = clock(ARGV[1])
local owner, permits, channel, call = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]

local left, ended, h = sharedRelease(KEYS[1], owner, call, now)
if not ended then return left end
semWake(KEYS[1], h[6], KEYS[3], KEYS[4], permits, channel, now)
return 0
