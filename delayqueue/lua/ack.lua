-- ack.lua: a delivery succeeded; delete everything of the job, for the
-- delivery that holds the lease only (same attempt, still in flight).
-- KEYS[1] inflight (zset); KEYS[2] payloads (hash); KEYS[3] meta (hash: id -> "attempt:due_us")
-- ARGV[1] id; ARGV[2] attempt
-- reply: 1 acked; 0 the lease is lost, nothing changed.
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
local attempt = string.match(redis.call('HGET', KEYS[3], id) or '', '^(%d+):')
if attempt ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
return 1
