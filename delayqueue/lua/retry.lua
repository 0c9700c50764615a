-- retry.lua: a delivery failed; schedule the job again at now + backoff, or
-- move it to dead when this was attempt max_attempts (or later). Only the
-- delivery that holds the lease may do so (same attempt, still in flight).
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] inflight (zset); KEYS[3] dead (zset: id -> µs of death);
-- KEYS[4] meta (hash: id -> "attempt:due_us")
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] attempt; ARGV[4] backoff µs;
-- ARGV[5] max attempts; ARGV[6] channel on which a new due time is published
-- reply: {1, due_us} scheduled again; {2, 0} dead; {0, 0} the lease is lost, nothing changed.
-- As in enqueue.lua, the due time is published only when it is the new head of scheduled.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local id = ARGV[2]
if not redis.call('ZSCORE', KEYS[2], id) then return {0, 0} end
local attempt = string.match(redis.call('HGET', KEYS[4], id) or '', '^(%d+):')
if attempt ~= ARGV[3] then return {0, 0} end
redis.call('ZREM', KEYS[2], id)
if tonumber(attempt) >= tonumber(ARGV[5]) then
  redis.call('ZADD', KEYS[3], string.format('%d', now), id)
  return {2, 0}
end
local due = now + tonumber(ARGV[4])
local sdue = string.format('%d', due)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('HSET', KEYS[4], id, attempt .. ':' .. sdue)
redis.call('ZADD', KEYS[1], sdue, id)
if not head[2] or due < tonumber(head[2]) then redis.call('PUBLISH', ARGV[6], sdue) end
return {1, due}
