-- claim.lua: take the ready job due first (ties: the smallest id) and lease it:
-- it moves to inflight until now + visibility, and its attempt count goes up
-- by one. The attempt number is the lease's fencing token: extend, ack and
-- retry act only for the delivery that holds it.
-- KEYS[1] ready (zset: id -> due µs); KEYS[2] inflight (zset: id -> lease deadline µs);
-- KEYS[3] payloads (hash); KEYS[4] meta (hash: id -> "attempt:due_us");
-- KEYS[5] this claim's receipt (string)
-- ARGV[1] now µs or "" for TIME; ARGV[2] visibility µs; ARGV[3] receipt lifetime µs
-- reply: {} when no job is ready; else {id, payload, attempt, due_us, deadline_us}
--
-- Receipts: every call that changes a job (claim, ack, retry, cancel, requeue)
-- carries a call ID that a client's resends of it share, and leaves what it did
-- in a string under "dq:k:<call ID>", "<deadline_us>:<what>", lasting ARGV[3] µs
-- by the clock the scripts use (the key's TTL only collects it), so that a
-- second run of the same call answers as the first without acting again. A
-- delivery's ack and retry reuse its claim's call ID, so one receipt per
-- delivery lives at a time: 'c<attempt>:<id>' claimed, 'a' acked,
-- 'r<code>:<due_us>' retried; 'x' is a cancel's, 'q' a requeue's.
--
-- Safe to run twice: a second run finds 'c<attempt>:<id>' and returns the same
-- delivery while it still holds the lease, {} once it does not.
local now = clock(ARGV[1])
local seen = receipt(KEYS[5], now)
local ca, cid = string.match(seen or '', '^c(%d+):(.*)$')
if seen and not ca then return {} end -- this claim's delivery was acked or retried since
if ca then
  local deadline = redis.call('ZSCORE', KEYS[2], cid)
  local attempt, due = string.match(redis.call('HGET', KEYS[4], cid) or '', '^(%d+):(%d+)$')
  if not deadline or attempt ~= ca then return {} end
  return {cid, redis.call('HGET', KEYS[3], cid) or '', tonumber(attempt), tonumber(due), tonumber(deadline)}
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
setReceipt(KEYS[5], now, ARGV[3], string.format('c%d:', attempt) .. id)
return {id, redis.call('HGET', KEYS[3], id) or '', attempt, due, deadline}
