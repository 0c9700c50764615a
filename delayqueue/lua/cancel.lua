-- cancel.lua: remove a job from whichever set holds it; it will not be delivered again.
-- KEYS[1] scheduled; KEYS[2] ready; KEYS[3] inflight; KEYS[4] dead; KEYS[5] payloads; KEYS[6] meta
-- ARGV[1] id
-- reply: 1 removed; 0 no such job.
local id = ARGV[1]
if redis.call('HDEL', KEYS[6], id) == 0 then return 0 end
redis.call('HDEL', KEYS[5], id)
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
return 1
