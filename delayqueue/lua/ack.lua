-- ack.lua: a delivery succeeded; delete everything of the job, for the
-- delivery that holds the lease only (same attempt, still in flight).
-- KEYS[1] inflight (zset); KEYS[2] payloads (hash); KEYS[3] meta (hash: id -> "attempt:due_us");
-- KEYS[4] calls (hash, see enqueue.lua); KEYS[5] the delivery's receipt (string, see claim.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] attempt; ARGV[4] receipt lifetime µs
-- reply: 1 acked; 0 the lease is lost, nothing changed.
-- Safe to run twice: an ack sets the delivery's receipt to 'a'; a second run
-- finds it and answers 1 without acting.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
-- receipt returns what an earlier run of this call recorded under KEYS[5],
-- while it lasts by the clock above; setReceipt records it for ARGV[4] µs.
local function receipt()
  local dl, body = string.match(redis.call('GET', KEYS[5]) or '', '^(%d+):(.*)$')
  if dl and tonumber(dl) > now then return body end
  return nil
end
local function setReceipt(body)
  local w = tonumber(ARGV[4])
  redis.call('SET', KEYS[5], string.format('%d:', now + w) .. body, 'PX', math.ceil(w / 1000) + 1000)
end
if receipt() == 'a' then return 1 end
local id = ARGV[2]
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
local attempt = string.match(redis.call('HGET', KEYS[3], id) or '', '^(%d+):')
if attempt ~= ARGV[3] then return 0 end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
setReceipt('a')
return 1
