-- extend.lua: move the lease deadline of a delivered job to now + visibility,
-- for the delivery that holds it only (same attempt, still in flight). A lease
-- whose deadline passed is still held until a take takes the job back.
-- KEYS[1] inflight (zset: id -> lease deadline µs); KEYS[2] meta (hash: id -> "attempt:due_us")
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] attempt; ARGV[4] visibility µs
-- reply: the new deadline µs; 0 when the lease is lost (the job was taken
-- back, delivered again, acked or cancelled).
-- Safe to run twice: a second run moves the deadline again, from its own now,
-- and answers as the first (a consumer counts its lease from before the first).
local now = clock(ARGV[1])
local id = ARGV[2]
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
local attempt = string.match(redis.call('HGET', KEYS[2], id) or '', '^(%d+):')
if attempt ~= ARGV[3] then return 0 end
local deadline = now + tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', deadline), id)
return deadline
