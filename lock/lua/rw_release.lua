-- rw_release.lua: drop one hold level of one side of an RWMutex, by its
-- holder only, and wake whoever can go next when the holding ends.
-- KEYS as rw_acquire.lua (KEYS[2] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on; ARGV[5] call id (the same in every
-- resend of this call)
-- reply: -1 not held (expired, taken over or gone); else the hold count left.
--
-- Safe to run twice. The release that ends a holding leaves its call id in
-- 'r' (KEYS[1] for the writer, KEYS[4] for readers) until the next such
-- release or the key's TTL: a resend answers 0 again. With Owner, the call
-- logs (see rw_acquire.lua) record the count each release left, so a resend
-- gets the same answer and releases nothing more.
--
-- Wake-up messages name who may retry, so that only they do: 'r'..p the
-- waiting readers up to place p (those queued before the first waiting
-- writer), 'r' every waiting reader, 'w'..p the writer at place p. A writer's
-- release thus wakes the readers queued before the next writer, together; the
-- last reader's release wakes the next writer.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, channel, call = ARGV[3], ARGV[4], ARGV[5]
local function int(x) return string.format('%d', x) end

-- logged: the value the call log records for call id, or nil.
local function logged(log, id)
  if not log then return nil end
  local _, e = string.find(log, ';' .. id .. '=', 1, true)
  if not e then return nil end
  return tonumber(string.match(log, '^-?%d+', e + 1))
end
-- record: the log with ";id=v" appended, keeping the last 8 entries.
local function record(log, id, v)
  log = (log or '') .. ';' .. id .. '=' .. string.format('%d', v)
  local _, n = string.gsub(log, ';', '')
  if n > 8 then log = string.sub(log, (string.find(log, ';', 2, true))) end
  return log
end

-- first: the place and owner of the longest live waiter of queue q (side s),
-- dropping dead ones from its head, at most 100 per call; past those, the
-- next one counts as live.
local function first(q, s)
  local head = redis.call('ZRANGE', q, 0, 99, 'WITHSCORES')
  for i = 1, #head, 2 do
    if tonumber(redis.call('HGET', KEYS[7], s .. head[i]) or '0') > now then
      return tonumber(head[i + 1]), head[i]
    end
    redis.call('ZREM', q, head[i])
    redis.call('HDEL', KEYS[7], s .. head[i])
  end
  local rest = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if rest[2] then return tonumber(rest[2]), rest[1] end
  return nil, nil
end

-- wake: publish who can go now, if anyone (see the header).
local function wake()
  local w = redis.call('HMGET', KEYS[1], 'o', 'd')
  if w[1] and tonumber(w[2]) > now then return end
  local fw, fwo = first(KEYS[6], 'w')
  local fr = first(KEYS[5], 'r')
  if fr and (not fw or fr < fw) then
    if fw then
      redis.call('PUBLISH', channel, 'r' .. int(fw - 1))
    else
      redis.call('PUBLISH', channel, 'r')
    end
    return
  end
  if fw then
    local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. int(now), '+inf', 'LIMIT', 0, 2)
    if #live == 0 or (#live == 1 and live[1] == fwo) then
      redis.call('PUBLISH', channel, 'w' .. int(fw))
    end
  end
end

if ARGV[2] == 'w' then
  local h = redis.call('HMGET', KEYS[1], 'o', 'c', 'd', 'k', 'r')
  if h[5] == call then return 0 end
  local done = logged(h[4], call)
  if done then return done end
  if h[1] ~= owner or tonumber(h[3]) <= now then return -1 end
  local c = tonumber(h[2])
  if c > 1 then
    redis.call('HSET', KEYS[1], 'c', c - 1, 'k', record(h[4], call, c - 1))
    return c - 1
  end
  redis.call('HDEL', KEYS[1], 'o', 'c', 't', 'd')
  redis.call('HSET', KEYS[1], 'r', call)
else
  local r = redis.call('HMGET', KEYS[4], 'k' .. owner, 'r')
  if r[2] == call then return 0 end
  local done = logged(r[1], call)
  if done then return done end
  if tonumber(redis.call('ZSCORE', KEYS[3], owner) or '0') <= now then return -1 end
  local c = redis.call('HINCRBY', KEYS[4], 'c' .. owner, -1)
  if c > 0 then
    redis.call('HSET', KEYS[4], 'k' .. owner, record(r[1], call, c))
    return c
  end
  redis.call('ZREM', KEYS[3], owner)
  redis.call('HDEL', KEYS[4], 'c' .. owner, 't' .. owner, 'k' .. owner)
  redis.call('HSET', KEYS[4], 'r', call)
end
wake()
return 0
