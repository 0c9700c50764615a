-- extend.lua: move the deadline of a held mutex, by its owner only; never acquires.
-- KEYS[1] lock hash; ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] ttl µs
-- reply: 1 extended, -1 not held.
local now = clock(ARGV[1])
return extend(KEYS[1], ARGV[2], tonumber(ARGV[3]), now)
