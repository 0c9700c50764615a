-- rw_extend.lua: move the lease deadline of one side of an RWMutex, by its
-- holder only; never acquires.
-- KEYS[1] lock hash (see rw_acquire.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] ttl µs
-- reply: 1 extended, -1 not held (expired, taken over or gone).
local now = clock(ARGV[1])
local owner, ttl = ARGV[3], tonumber(ARGV[4])
if ARGV[2] == 'w' then return extend(KEYS[1], owner, ttl, now) end
return sharedExtend(KEYS[1], owner, ttl, now)
