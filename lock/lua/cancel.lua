-- cancel.lua: a mutex acquire whose caller gave up without an answer (its
-- context ended or the connection failed during the call) must hold nothing,
-- whenever the acquire runs: before, after or twice around this script.
-- KEYS as acquire.lua; KEYS[5] the abandoned call's tombstone
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] call id of the
-- abandoned acquire; ARGV[4] ttl µs of the lease it asked for; ARGV[5]
-- channel to wake the next waiter on; ARGV[6] reentrant (1/0)
-- reply: 1 the call's hold level was given back; 0 it held nothing.
--
-- The tombstone (PX = the lease's TTL) makes acquire.lua refuse the call if it
-- lands later, or lands again. The caller leaves the waiter queue. When the
-- call holds the lock — without Owner: owner holds it, since the owner id is
-- this Lock call's own; with Owner: the call log names this call with the
-- live holding's token — its level is released as release.lua would, with
-- the wake-up. The log then names the cancel ('~'..call), so a second run
-- releases nothing more.
redis.call('SET', KEYS[5], '1', 'PX', math.ceil(tonumber(ARGV[4]) / 1000))
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, call = ARGV[2], ARGV[3]

-- logged and record: as in acquire.lua.
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

redis.call('ZREM', KEYS[3], owner)
redis.call('HDEL', KEYS[4], owner)
local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k')
local held = h[1] == owner and tonumber(h[4]) > now
local undo = held and not logged(h[5], '~' .. call) and
  (ARGV[6] ~= '1' or logged(h[5], call) == tonumber(h[3]))
if undo then
  local c = tonumber(h[2])
  if ARGV[6] == '1' and c > 1 then
    redis.call('HSET', KEYS[1], 'c', c - 1, 'k', record(h[5], '~' .. call, c - 1))
    return 1
  end
  redis.call('HDEL', KEYS[1], 'o', 'c', 't', 'd')
  if ARGV[6] == '1' then redis.call('HSET', KEYS[1], 'k', record(h[5], '~' .. call, 0)) end
elseif h[1] and tonumber(h[4]) > now then
  return 0
end
-- The lock is free: wake the longest live waiter, as release.lua does (this
-- caller may have consumed a wake-up meant to pass on).
local next = ''
local head = redis.call('ZRANGE', KEYS[3], 0, 99)
for _, w in ipairs(head) do
  if tonumber(redis.call('HGET', KEYS[4], w) or '0') > now then
    next = w
    break
  end
  redis.call('ZREM', KEYS[3], w)
  redis.call('HDEL', KEYS[4], w)
end
if undo or next ~= '' then redis.call('PUBLISH', ARGV[5], next) end
if undo then return 1 end
return 0
