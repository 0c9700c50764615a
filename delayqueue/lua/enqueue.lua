-- enqueue.lua: add jobs, each unless a job with its id exists (in any state).
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] payloads (hash: id -> payload);
-- KEYS[3] meta (hash: id -> "attempt:due_us"); KEYS[4] calls (hash: id -> call ID
--   of the Enqueue that added a job whose id the caller chose); KEYS[5] the waker (see take.lua)
-- ARGV[1] now µs or "" for TIME; ARGV[2] the queue's channel, on which due times
-- are published to wake sleeping consumers; ARGV[3] call ID of this Enqueue;
-- then four per job: id, payload, when and µs: when "a" (or "A") µs is the due
-- time, "d" (or "D") a delay from now; the capital letter says that the caller
-- chose the id, the small one that it was drawn at random for this call. The
-- ids of one call differ.
-- reply: two per job: {1, due_us} enqueued; {2, due_us} enqueued already by
-- this call (a replay: nothing changed); {0, 0} another call's job has the
-- id, nothing changed.
-- Safe to run twice: a random id is drawn once per Enqueue call, so a job with
-- it is this call's; a chosen id is this call's when calls[id] is its call ID.
-- calls[id] lives exactly as long as the job (ack and cancel delete it).
-- A due time is published only when a consumer must wake earlier than it
-- plans to (see schedule in common.lua).
-- Times are µs since the epoch, below 2^53 (exact in Lua's doubles); they are
-- formatted with %d before they go back to Redis.
local now = clock(ARGV[1])
local call = ARGV[3]
local reply, zadd, payloads, calls = {}, {}, {}, {}
local first
for i = 4, #ARGV, 4 do
  local id, when = ARGV[i], ARGV[i + 2]
  local due = tonumber(ARGV[i + 3])
  if when == 'd' or when == 'D' then due = now + due end
  local sdue = string.format('%d', due)
  -- The meta field exists exactly while the job is in the queue.
  if redis.call('HSETNX', KEYS[3], id, '0:' .. sdue) == 1 then
    payloads[#payloads + 1] = id
    payloads[#payloads + 1] = ARGV[i + 1]
    if when == 'A' or when == 'D' then
      calls[#calls + 1] = id
      calls[#calls + 1] = call
    end
    zadd[#zadd + 1] = sdue
    zadd[#zadd + 1] = id
    if not first or due < first then first = due end
    reply[#reply + 1] = 1
    reply[#reply + 1] = due
  elseif (when == 'a' or when == 'd') or redis.call('HGET', KEYS[4], id) == call then
    reply[#reply + 1] = 2
    reply[#reply + 1] = tonumber(string.match(redis.call('HGET', KEYS[3], id), ':(%d+)$')) or 0
  else
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
  end
end
if first then
  redis.call('HSET', KEYS[2], unpack(payloads))
  if #calls > 0 then redis.call('HSET', KEYS[4], unpack(calls)) end
  schedule(KEYS[1], KEYS[5], ARGV[2], zadd, first, now)
end
return reply
