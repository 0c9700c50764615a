-- sem_cancel.lua: a Semaphore acquire whose caller gave up without an answer
-- (its context ended or the connection failed during the call) must hold
-- nothing, whenever the acquire runs: before, after or twice around this
-- script.
-- KEYS as sem_acquire.lua; KEYS[6] the abandoned call's tombstone
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits; ARGV[4]
-- channel to wake waiters on; ARGV[5] call id of the abandoned acquire;
-- ARGV[6] ttl µs of the lease it asked for; ARGV[7] reentrant (1/0)
-- reply: 1 the call's hold level was given back; 0 it held nothing.
--
-- As cancel.lua: the tombstone (PX = the lease's TTL) makes sem_acquire.lua
-- refuse the call if it lands later; the caller leaves the queue; when the
-- call holds a level (without Owner: owner holds a permit; with Owner: the
-- holding's log names the call with its token) that level is released and
-- the log names the cancel ('~'..call), so a second run releases nothing
-- more; then the waiters that free permits can admit are woken, as
-- sem_leave.lua does.
redis.call('SET', KEYS[6], '1', 'PX', math.ceil(tonumber(ARGV[6]) / 1000))
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, permits, channel, call = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local reentrant = ARGV[7] == '1'
local function int(x) return string.format('%d', x) end

-- logged and record: as in sem_acquire.lua.
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

redis.call('ZREM', KEYS[4], owner)
redis.call('HDEL', KEYS[5], owner)
local undone = 0
if tonumber(redis.call('ZSCORE', KEYS[1], owner) or '0') > now then
  local r = redis.call('HMGET', KEYS[2], 'c' .. owner, 't' .. owner, 'k' .. owner)
  if not logged(r[3], '~' .. call) and (not reentrant or logged(r[3], call) == tonumber(r[2])) then
    undone = 1
    local c = tonumber(r[1] or '1')
    if reentrant and c > 1 then
      redis.call('HSET', KEYS[2], 'c' .. owner, c - 1, 'k' .. owner, record(r[3], '~' .. call, c - 1))
      return 1
    end
    redis.call('ZREM', KEYS[1], owner)
    redis.call('HDEL', KEYS[2], 'c' .. owner, 't' .. owner, 'k' .. owner)
  end
end
local free = permits - redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
if free <= 0 then return undone end
local head = redis.call('ZRANGE', KEYS[4], 0, 99)
for _, w in ipairs(head) do
  if tonumber(redis.call('HGET', KEYS[5], w) or '0') > now then break end
  redis.call('ZREM', KEYS[4], w)
  redis.call('HDEL', KEYS[5], w)
end
local last = redis.call('ZRANGE', KEYS[4], free - 1, free - 1, 'WITHSCORES')
if not last[2] then last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES') end
if last[2] then redis.call('PUBLISH', channel, 's' .. int(tonumber(last[2]))) end
return undone
