-- enqueue.lua: add a job, unless a job with its id exists (in any state).
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] payloads (hash: id -> payload);
-- KEYS[3] meta (hash: id -> "attempt:due_us"); KEYS[4] calls (hash: id -> call ID
--   of the Enqueue that added a job whose id the caller chose); KEYS[5] the waker (see take.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] id; ARGV[3] payload;
-- ARGV[4] "a": ARGV[5] is the due time in µs, or "d": ARGV[5] is a delay in µs from now;
-- ARGV[6] the queue's channel, on which due times are published to wake sleeping consumers;
-- ARGV[7] call ID of this Enqueue, or "" when the id was drawn at random for it
-- reply: {1, due_us} enqueued; {2, due_us} enqueued already by this call (a
-- replay: nothing changed); {0, 0} another call's job has the id, nothing changed.
-- Safe to run twice: a random id is drawn once per Enqueue call, so a job with
-- it is this call's; a chosen id is this call's when calls[id] is its call ID.
-- calls[id] lives exactly as long as the job (ack and cancel delete it).
-- The due time is published only when a consumer must wake earlier than it
-- plans to (see schedule in common.lua).
-- Times are µs since the epoch, below 2^53 (exact in Lua's doubles); they are
-- formatted with %d before they go back to Redis.
local now = clock(ARGV[1])
local id, call = ARGV[2], ARGV[7]
local due = tonumber(ARGV[5])
if ARGV[4] == 'd' then due = now + due end
local sdue = string.format('%d', due)
-- The meta field exists exactly while the job is in the queue.
if redis.call('HSETNX', KEYS[3], id, '0:' .. sdue) == 0 then
  if call == '' or redis.call('HGET', KEYS[4], id) == call then
    local d = string.match(redis.call('HGET', KEYS[3], id), ':(%d+)$')
    return {2, tonumber(d) or 0}
  end
  return {0, 0}
end
redis.call('HSET', KEYS[2], id, ARGV[3])
if call ~= '' then redis.call('HSET', KEYS[4], id, call) end
schedule(KEYS[1], KEYS[5], ARGV[6], id, due, now)
return {1, due}
