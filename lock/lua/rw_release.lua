-- rw_release.lua: drop one hold level of one side of an RWMutex, by its
-- holder only, and wake whoever can go next when the holding ends.
-- KEYS as rw_acquire.lua (KEYS[2] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on
-- reply: -1 not held (expired, taken over or gone); else the hold count left.
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
local owner, channel = ARGV[3], ARGV[4]
local function int(x) return string.format('%d', x) end

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
  local h = redis.call('HMGET', KEYS[1], 'o', 'c', 'd')
  if h[1] ~= owner or tonumber(h[3]) <= now then return -1 end
  local c = tonumber(h[2])
  if c > 1 then
    redis.call('HSET', KEYS[1], 'c', c - 1)
    return c - 1
  end
  redis.call('DEL', KEYS[1])
else
  if tonumber(redis.call('ZSCORE', KEYS[3], owner) or '0') <= now then return -1 end
  local c = redis.call('HINCRBY', KEYS[4], 'c' .. owner, -1)
  if c > 0 then return c end
  redis.call('ZREM', KEYS[3], owner)
  redis.call('HDEL', KEYS[4], 'c' .. owner, 't' .. owner)
end
wake()
return 0
