-- clear.lua: forget the failures of a key (Succeed), and with ARGV[1] = "1"
-- lift its ban too (Reset). Mirrored by memory.go (memClear).
-- KEYS[1] ban, KEYS[2] failure log, as in fail.lua
-- ARGV[1] lift the ban (1/0)
-- reply: 1
redis.call('DEL', KEYS[2])
if ARGV[1] == '1' then redis.call('DEL', KEYS[1]) end
return 1
