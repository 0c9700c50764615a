-- rw_leave.lua: a waiter of an RWMutex gives up (its context ended). It
-- leaves the queue and wakes whoever can go now in its place, as
-- rw_release.lua does: readers that only waited behind this writer, or a
-- wake-up this waiter may have consumed.
-- KEYS as rw_acquire.lua (KEYS[2], KEYS[4] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on
-- reply: 0.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local side, owner, channel = ARGV[2], ARGV[3], ARGV[4]
local function int(x) return string.format('%d', x) end

if side == 'w' then
  redis.call('ZREM', KEYS[6], owner)
else
  redis.call('ZREM', KEYS[5], owner)
end
redis.call('HDEL', KEYS[7], side .. owner)

-- first: as in rw_release.lua.
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

-- wake: as in rw_release.lua.
local w = redis.call('HMGET', KEYS[1], 'o', 'd')
if w[1] and tonumber(w[2]) > now then return 0 end
local fw, fwo = first(KEYS[6], 'w')
local fr = first(KEYS[5], 'r')
if fr and (not fw or fr < fw) then
  if fw then
    redis.call('PUBLISH', channel, 'r' .. int(fw - 1))
  else
    redis.call('PUBLISH', channel, 'r')
  end
  return 0
end
if fw then
  local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. int(now), '+inf', 'LIMIT', 0, 2)
  if #live == 0 or (#live == 1 and live[1] == fwo) then
    redis.call('PUBLISH', channel, 'w' .. int(fw))
  end
end
return 0
