-- cancel.lua: remove a job from whichever set holds it; it will not be delivered again.
-- KEYS[1] scheduled; KEYS[2] an older version's ready set (see take.lua); KEYS[3] inflight; KEYS[4] dead; KEYS[5] payloads; KEYS[6] meta;
-- KEYS[7] calls (hash, see enqueue.lua); KEYS[8] this call's receipt (string, see take.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] receipt lifetime µs
-- reply: 1 removed; 0 no such job.
-- Safe to run twice: a cancel that removed a job leaves the receipt 'x'; a
-- second run finds it and answers 1 without acting (not even on a job enqueued
-- with the id since).
local now = clock(ARGV[1])
if receipt(KEYS[8], now) == 'x' then return 1 end
local id = ARGV[2]
if redis.call('HDEL', KEYS[6], id) == 0 then return 0 end
redis.call('HDEL', KEYS[5], id)
redis.call('HDEL', KEYS[7], id)
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
setReceipt(KEYS[8], now, ARGV[3], 'x')
return 1
