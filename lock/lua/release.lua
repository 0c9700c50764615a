-- release.lua: drop one hold level of a mutex, by its owner only.
-- KEYS[1] lock hash; KEYS[3] waiter queue; KEYS[4] waiter deadlines (KEYS[2] unused)
-- ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] channel to wake the next waiter on;
-- ARGV[4] call id (the same in every resend of this call)
-- reply: -1 not held (expired, taken over or gone); else the hold count left.
-- On the last level it ends the holding and publishes the longest live waiter's
-- owner id (or "" when none), so only that waiter retries: no thundering herd.
--
-- Safe to run twice. The release that ends a holding leaves its call id in
-- r, which stays in the hash until the hash's TTL (the end of the released
-- lease) or the next such release: a resend answers 0 again. With Owner, the
-- call log k (see acquire.lua) records the count each release left, and a
-- resend of a logged call gets that answer without releasing another level.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local call = ARGV[4]

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

local h = redis.call('HMGET', KEYS[1], 'o', 'c', 'd', 'k', 'r')
if h[5] == call then return 0 end
local done = logged(h[4], call)
if done then return done end
if not h[1] or h[1] ~= ARGV[2] or tonumber(h[3]) <= now then return -1 end
local c = tonumber(h[2])
if c > 1 then
  redis.call('HSET', KEYS[1], 'c', c - 1, 'k', record(h[4], call, c - 1))
  return c - 1
end
redis.call('HDEL', KEYS[1], 'o', 'c', 't', 'd')
redis.call('HSET', KEYS[1], 'r', call)
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
redis.call('PUBLISH', ARGV[3], next)
return 0
