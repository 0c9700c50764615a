-- cancel.lua: remove a job from whichever set holds it; it will not be delivered again.
-- KEYS[1] scheduled; KEYS[2] ready; KEYS[3] inflight; KEYS[4] dead; KEYS[5] payloads; KEYS[6] meta;
-- KEYS[7] calls (hash, see enqueue.lua); KEYS[8] this call's receipt (string, see claim.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] receipt lifetime µs
-- reply: 1 removed; 0 no such job.
-- Safe to run twice: a cancel that removed a job leaves the receipt 'x'; a
-- second run finds it and answers 1 without acting (not even on a job enqueued
-- with the id since).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
-- receipt returns what an earlier run of this call recorded under KEYS[8],
-- while it lasts by the clock above; setReceipt records it for ARGV[3] µs.
local function receipt()
  local dl, body = string.match(redis.call('GET', KEYS[8]) or '', '^(%d+):(.*)$')
  if dl and tonumber(dl) > now then return body end
  return nil
end
local function setReceipt(body)
  local w = tonumber(ARGV[3])
  redis.call('SET', KEYS[8], string.format('%d:', now + w) .. body, 'PX', math.ceil(w / 1000) + 1000)
end
if receipt() == 'x' then return 1 end
local id = ARGV[2]
if redis.call('HDEL', KEYS[6], id) == 0 then return 0 end
redis.call('HDEL', KEYS[5], id)
redis.call('HDEL', KEYS[7], id)
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
setReceipt('x')
return 1
