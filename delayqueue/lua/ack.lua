-- ack.lua: a delivery succeeded; delete everything of the job, for the
-- delivery that holds the lease only (same attempt, still in flight).
-- KEYS[1] inflight (zset); KEYS[2] payloads (hash); KEYS[3] meta (hash: id -> "attempt:due_us");
-- KEYS[4] calls (hash, see enqueue.lua); KEYS[5] the delivery's receipt (string, see claim.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] attempt; ARGV[4] receipt lifetime µs
-- reply: 1 acked; 0 the lease is lost, nothing changed.
-- Safe to run twice: an ack sets the delivery's receipt to 'a'; a second run
-- finds it and answers 1 without acting.
local now = clock(ARGV[1])
if receipt(KEYS[5], now) == 'a' then return 1 end
local id = ARGV[2]
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
local attempt = string.match(redis.call('HGET', KEYS[3], id) or '', '^(%d+):')
if attempt ~= ARGV[3] then return 0 end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
setReceipt(KEYS[5], now, ARGV[4], 'a')
return 1
