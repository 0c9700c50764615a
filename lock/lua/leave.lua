-- leave.lua: a waiter gives up (its context ended). It leaves the queue and,
-- when the lock is free, wakes the next waiter in its place.
-- KEYS[1] lock hash; KEYS[3] waiter queue; KEYS[4] waiter deadlines
-- ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] channel
local now = clock(ARGV[1])
unqueue(KEYS[3], KEYS[4], ARGV[2], '')
local d = redis.call('HGET', KEYS[1], 'd')
if d and tonumber(d) > now then return 0 end
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] then redis.call('PUBLISH', ARGV[3], head[1]) end
return 1
