-- retry.lua: a delivery failed; schedule the job again at now + backoff, or
-- move it to dead when this was attempt max_attempts (or later). Only the
-- delivery that holds the lease may do so (same attempt, still in flight).
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] inflight (zset); KEYS[3] dead (zset: id -> µs of death);
-- KEYS[4] meta (hash: id -> "attempt:due_us"); KEYS[5] the delivery's receipt (string, see take.lua);
-- KEYS[6] the waker (see take.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] attempt; ARGV[4] backoff µs;
-- ARGV[5] max attempts; ARGV[6] the queue's channel;
-- ARGV[7] receipt lifetime µs
-- reply: {1, due_us} scheduled again; {2, 0} dead; {0, 0} the lease is lost, nothing changed.
-- Safe to run twice: a retry sets the delivery's receipt to 'r' .. its reply;
-- a second run returns that reply without acting.
-- As in enqueue.lua, schedule (common.lua) wakes a consumer when one must wake earlier.
local now = clock(ARGV[1])
local code, d = string.match(receipt(KEYS[5], now) or '', '^r(%d+):(%d+)$')
if code then return {tonumber(code), tonumber(d)} end
local id = ARGV[2]
if not redis.call('ZSCORE', KEYS[2], id) then return {0, 0} end
local attempt = string.match(redis.call('HGET', KEYS[4], id) or '', '^(%d+):')
if attempt ~= ARGV[3] then return {0, 0} end
redis.call('ZREM', KEYS[2], id)
if tonumber(attempt) >= tonumber(ARGV[5]) then
  redis.call('ZADD', KEYS[3], string.format('%d', now), id)
  setReceipt(KEYS[5], now, ARGV[7], 'r2:0')
  return {2, 0}
end
local due = now + tonumber(ARGV[4])
local sdue = string.format('%d', due)
redis.call('HSET', KEYS[4], id, attempt .. ':' .. sdue)
schedule(KEYS[1], KEYS[6], ARGV[6], {sdue, id}, due, now)
setReceipt(KEYS[5], now, ARGV[7], 'r1:' .. sdue)
return {1, due}
