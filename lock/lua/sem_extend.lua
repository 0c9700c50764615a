-- sem_extend.lua: move the lease deadline of a Semaphore permit, by its
-- holder only; never acquires.
-- KEYS[1] lock hash (see sem_acquire.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] ttl µs
-- reply: 1 extended, -1 not held (expired or gone).
local now = clock(ARGV[1])
return sharedExtend(KEYS[1], ARGV[2], tonumber(ARGV[3]), now)
