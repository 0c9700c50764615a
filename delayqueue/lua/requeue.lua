-- requeue.lua: give a dead job a new life: it is scheduled again, due now,
-- with its attempt count reset to 0.
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] dead (zset); KEYS[3] meta (hash: id -> "attempt:due_us");
-- KEYS[4] this call's receipt (string, see claim.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] channel on which the due time is published;
-- ARGV[4] receipt lifetime µs
-- reply: 1 requeued; 0 no dead job has the id.
-- Safe to run twice: a requeue leaves the receipt 'q'; a second run finds it
-- and answers 1 without acting.
local now = clock(ARGV[1])
if receipt(KEYS[4], now) == 'q' then return 1 end
local id = ARGV[2]
if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
local snow = string.format('%d', now)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('HSET', KEYS[3], id, '0:' .. snow)
redis.call('ZADD', KEYS[1], snow, id)
if not head[2] or now < tonumber(head[2]) then redis.call('PUBLISH', ARGV[3], snow) end
setReceipt(KEYS[4], now, ARGV[4], 'q')
return 1
