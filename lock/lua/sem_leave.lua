-- sem_leave.lua: a waiter of a Semaphore gives up (its context ended). It
-- leaves the queue and, as sem_release.lua does, wakes the waiters that free
-- permits can admit: a wake-up this waiter may have consumed goes on.
-- KEYS as sem_acquire.lua (KEYS[2] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits;
-- ARGV[4] channel to wake waiters on
-- reply: 0.
local now = clock(ARGV[1])
local owner, permits, channel = ARGV[2], tonumber(ARGV[3]), ARGV[4]

unqueue(KEYS[3], KEYS[4], owner, '')
semWake(KEYS[1], redis.call('HGET', KEYS[1], 'q'), KEYS[3], KEYS[4], permits, channel, now)
return 0
