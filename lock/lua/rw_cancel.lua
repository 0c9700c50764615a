-- rw_cancel.lua: an acquire of one side of an RWMutex whose caller gave up
-- without an answer (its context ended or the connection failed during the
-- call) must hold nothing, whenever the acquire runs: before, after or twice
-- around this script.
-- KEYS as rw_acquire.lua; KEYS[8] the abandoned call's tombstone
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on; ARGV[5] call id of the abandoned
-- acquire; ARGV[6] ttl µs of the lease it asked for; ARGV[7] reentrant (1/0)
-- reply: 1 the call's hold level was given back; 0 it held nothing.
--
-- As cancel.lua: the tombstone (PX = the lease's TTL) makes rw_acquire.lua
-- refuse the call if it lands later; the caller leaves its queue; when the
-- call holds a level (without Owner: owner holds the side; with Owner: the
-- holding's log names the call with its token) that level is released and
-- the log names the cancel ('~'..call), so a second run releases nothing
-- more; then whoever can go now is woken, as rw_leave.lua does.
redis.call('SET', KEYS[8], '1', 'PX', math.ceil(tonumber(ARGV[6]) / 1000))
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local side, owner, channel, call = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local reentrant = ARGV[7] == '1'
local function int(x) return string.format('%d', x) end

-- logged and record: as in rw_acquire.lua.
local function logged(log, id)
  if not log then return nil end
  local _, e = string.find(log, ';' .. id .. '=', 1, true)
  if not e then return nil end
  return tonumber(string.match(log, '^-?%d+', e + 1))
end
local function record(log, id, v)
  log = (log or '') .. ';' .. id .. '=' .. string.format('%d', v)
  local _, n = string.gsub(log, ';', '')
  if n > 8 then log = string.sub(log, (string.find(log, ';', 2, true))) end
  return log
end

if side == 'w' then
  redis.call('ZREM', KEYS[6], owner)
else
  redis.call('ZREM', KEYS[5], owner)
end
redis.call('HDEL', KEYS[7], side .. owner)

local undone = 0
if side == 'w' then
  local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k')
  if h[1] == owner and tonumber(h[4]) > now and not logged(h[5], '~' .. call) and
    (not reentrant or logged(h[5], call) == tonumber(h[3])) then
    undone = 1
    local c = tonumber(h[2])
    if reentrant and c > 1 then
      redis.call('HSET', KEYS[1], 'c', c - 1, 'k', record(h[5], '~' .. call, c - 1))
      return 1
    end
    redis.call('HDEL', KEYS[1], 'o', 'c', 't', 'd')
    if reentrant then redis.call('HSET', KEYS[1], 'k', record(h[5], '~' .. call, 0)) end
  end
elseif tonumber(redis.call('ZSCORE', KEYS[3], owner) or '0') > now then
  local r = redis.call('HMGET', KEYS[4], 'c' .. owner, 't' .. owner, 'k' .. owner)
  if not logged(r[3], '~' .. call) and (not reentrant or logged(r[3], call) == tonumber(r[2])) then
    undone = 1
    local c = tonumber(r[1] or '1')
    if reentrant and c > 1 then
      redis.call('HSET', KEYS[4], 'c' .. owner, c - 1, 'k' .. owner, record(r[3], '~' .. call, c - 1))
      return 1
    end
    redis.call('ZREM', KEYS[3], owner)
    redis.call('HDEL', KEYS[4], 'c' .. owner, 't' .. owner, 'k' .. owner)
  end
end

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
if w[1] and tonumber(w[2]) > now then return undone end
local fw, fwo = first(KEYS[6], 'w')
local fr = first(KEYS[5], 'r')
if fr and (not fw or fr < fw) then
  if fw then
    redis.call('PUBLISH', channel, 'r' .. int(fw - 1))
  else
    redis.call('PUBLISH', channel, 'r')
  end
  return undone
end
if fw then
  local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. int(now), '+inf', 'LIMIT', 0, 2)
  if #live == 0 or (#live == 1 and live[1] == fwo) then
    redis.call('PUBLISH', channel, 'w' .. int(fw))
  end
end
return undone
