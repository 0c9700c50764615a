-- allow.lua: decide n units against every rule of a Limiter, atomically; only
-- when every rule admits them are they consumed (n == 0 peeks). It runs after
-- common.lua and the algorithm files of the kinds the Limiter uses.
-- KEYS[i]: state key of rule i (every SlidingLog rule names the same log key).
-- ARGV[1] now in µs, or "" to use TIME; ARGV[2] n; ARGV[3] mode (0 allow, 1 reset);
-- ARGV[4 + 5(i-1) ...]: rule i as kind and 4 parameters (separate arguments:
-- tonumber on each is cheaper than parsing one string):
--   1 FixedWindow   limit, window_us, 0, 0
--   2 SlidingWindow limit, buckets, bucket_us, 0
--   3 SlidingLog    limit, window_us, max log window_us, 0
--   4 drain         capacity, per_us, rate, delay (-1 none)
-- reply: {allowed (1/0), then per rule: status, remaining, retry_us, reset_us, delay_us}
-- Needs Redis >= 5 (effects replication, so that TIME may precede writes).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local n = tonumber(ARGV[2])
local P = {}
for i = 4, #ARGV do P[i - 3] = tonumber(ARGV[i]) end
local R = (#ARGV - 3) / 5

if ARGV[3] == '1' then
  for i = 1, R do
    local o = (i - 1) * 5
    if P[o + 1] == 1 then
      fixed_reset(KEYS[i])
    else
      redis.call('DEL', KEYS[i])
    end
  end
  return {1}
end

local reply = {1}
local pending = {}
local ok = true
local newest = false
for i = 1, R do
  local o = (i - 1) * 5
  local kind, a, b, c, d = P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5]
  local s, rem, retry, reset, dl, x
  if kind == 4 then
    s, rem, retry, reset, dl, x = drain_check(KEYS[i], a, b, c, d, now, n)
  elseif kind == 1 then
    s, rem, retry, reset, dl, x = fixed_check(KEYS[i], a, b, now, n)
  elseif kind == 2 then
    s, rem, retry, reset, dl, x = sliding_check(KEYS[i], a, b, c, now, n)
  else
    if newest == false then newest = log_newest(KEYS[i]) end
    s, rem, retry, reset, dl, x = log_check(KEYS[i], a, b, now, n, newest)
  end
  if s ~= 1 then ok = false end
  pending[i] = x
  local j = #reply
  reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = s, rem, retry, reset, dl
end

if not ok then
  reply[1] = 0
elseif n > 0 then
  local logged = false
  for i = 1, R do
    local o = (i - 1) * 5
    local kind = P[o + 1]
    if kind == 4 then
      drain_commit(KEYS[i], P[o + 4], now, pending[i])
    elseif kind == 1 then
      fixed_commit(KEYS[i], P[o + 3], now, pending[i])
    elseif kind == 2 then
      sliding_commit(KEYS[i], P[o + 3], P[o + 4], now, n, pending[i])
    elseif not logged then
      log_commit(KEYS[i], P[o + 4], now, n, newest)
      logged = true
    end
  end
end
return reply
