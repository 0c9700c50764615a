-- requeue.lua: give a dead job a new life: it is scheduled again, due now,
-- with its attempt count reset to 0.
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] dead (zset); KEYS[3] meta (hash: id -> "attempt:due_us");
-- KEYS[4] this call's receipt (string, see take.lua); KEYS[5] the waker (see take.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] the queue's channel;
-- ARGV[4] receipt lifetime µs
-- reply: 1 requeued; 0 no dead job has the id.
-- Safe to run twice: a requeue leaves the receipt 'q'; a second run finds it
-- and answers 1 without acting.
local now = clock(ARGV[1])
if receipt(KEYS[4], now) == 'q' then return 1 end
local id = ARGV[2]
if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
local snow = string.format('%d', now)
redis.call('HSET', KEYS[3], id, '0:' .. snow)
schedule(KEYS[1], KEYS[5], ARGV[3], {snow, id}, now, now)
setReceipt(KEYS[4], now, ARGV[4], 'q')
return 1
