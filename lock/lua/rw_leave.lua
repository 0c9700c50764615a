-- rw_leave.lua: a waiter of an RWMutex gives up (its context ended). It
-- leaves the queue and wakes whoever can go now in its place, as
-- rw_release.lua does: readers that only waited behind this writer, or a
-- wake-up this waiter may have consumed.
-- KEYS as rw_acquire.lua (KEYS[2] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on
-- reply: 0.
local now = clock(ARGV[1])
local side, owner, channel = ARGV[2], ARGV[3], ARGV[4]

local myq = KEYS[3]
if side == 'w' then myq = KEYS[4] end
unqueue(myq, KEYS[5], owner, side)
rwWake(KEYS[1], redis.call('HGET', KEYS[1], 'q'), KEYS[3], KEYS[4], KEYS[5], channel, now)
return 0
