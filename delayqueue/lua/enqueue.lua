-- enqueue.lua: add a job, unless a job with its id exists (in any state).
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] payloads (hash: id -> payload);
-- KEYS[3] meta (hash: id -> "attempt:due_us")
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] payload;
-- ARGV[4] "a": ARGV[5] is the due time in µs, or "d": ARGV[5] is a delay in µs from now;
-- ARGV[6] channel on which the due time is published to wake sleeping consumers
-- reply: {1, due_us} enqueued; {0, 0} the id exists, nothing changed.
-- The due time is published only when the job is the new head of scheduled:
-- an idle consumer already plans to wake no later than the old head.
-- Times are µs since the epoch, below 2^53 (exact in Lua's doubles); they are
-- formatted with %d before they go back to Redis.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local id = ARGV[2]
local due = tonumber(ARGV[5])
if ARGV[4] == 'd' then due = now + due end
local sdue = string.format('%d', due)
-- The meta field exists exactly while the job is in the queue.
if redis.call('HSETNX', KEYS[3], id, '0:' .. sdue) == 0 then return {0, 0} end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('HSET', KEYS[2], id, ARGV[3])
redis.call('ZADD', KEYS[1], sdue, id)
if not head[2] or due < tonumber(head[2]) then redis.call('PUBLISH', ARGV[6], sdue) end
return {1, due}
