-- claim.lua: take the ready job due first (ties: the smallest id) and lease it:
-- it moves to inflight until now + visibility, and its attempt count goes up
-- by one. The attempt number is the lease's fencing token: extend, ack and
-- retry act only for the delivery that holds it.
-- KEYS[1] ready (zset: id -> due µs); KEYS[2] inflight (zset: id -> lease deadline µs);
-- KEYS[3] payloads (hash); KEYS[4] meta (hash: id -> "attempt:due_us")
-- ARGV[1] now µs or "" for TIME; ARGV[2] visibility µs
-- reply: {} when no job is ready; else {id, payload, attempt, due_us, deadline_us}
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local top = redis.call('ZPOPMIN', KEYS[1])
if not top[1] then return {} end
local id = top[1]
local attempt, due = string.match(redis.call('HGET', KEYS[4], id) or '0:0', '^(%d+):(%d+)$')
attempt = (tonumber(attempt) or 0) + 1
due = tonumber(due) or tonumber(top[2])
local deadline = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[4], id, string.format('%d:%d', attempt, due))
redis.call('ZADD', KEYS[2], string.format('%d', deadline), id)
return {id, redis.call('HGET', KEYS[3], id) or '', attempt, due, deadline}
