-- reset.lua: delete a Bloom filter.
-- KEYS[1..s] every shard key of the filter (at most 128).
-- reply: the number of keys that existed.
return redis.call('DEL', unpack(KEYS))
