-- requeue.lua: give a dead job a new life: it is scheduled again, due now,
-- with its attempt count reset to 0.
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] dead (zset); KEYS[3] meta (hash: id -> "attempt:due_us");
-- KEYS[4] this call's receipt (string, see claim.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] channel on which the due time is published;
-- ARGV[4] receipt lifetime µs
-- reply: 1 requeued; 0 no dead job has the id.
-- Safe to run twice: a requeue leaves the receipt 'q'; a second run finds it
-- and answers 1 without acting.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
-- receipt returns what an earlier run of this call recorded under KEYS[4],
-- while it lasts by the clock above; setReceipt records it for ARGV[4] µs.
local function receipt()
  local dl, body = string.match(redis.call('GET', KEYS[4]) or '', '^(%d+):(.*)$')
  if dl and tonumber(dl) > now then return body end
  return nil
end
local function setReceipt(body)
  local w = tonumber(ARGV[4])
  redis.call('SET', KEYS[4], string.format('%d:', now + w) .. body, 'PX', math.ceil(w / 1000) + 1000)
end
if receipt() == 'q' then return 1 end
local id = ARGV[2]
if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
local snow = string.format('%d', now)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('HSET', KEYS[3], id, '0:' .. snow)
redis.call('ZADD', KEYS[1], snow, id)
if not head[2] or now < tonumber(head[2]) then redis.call('PUBLISH', ARGV[3], snow) end
setReceipt('q')
return 1
