-- reset.lua: delete a counter (a Window counter: its stored window, which is
-- the current one or reads 0 anyway).
-- KEYS[1] the counter, as in add.lua
-- ARGV: as before (now, mode, window, offset), unused: the state is KEYS[1].
-- reply: 1
redis.call('DEL', KEYS[1])
return 1
