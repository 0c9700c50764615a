-- allow.lua: decide n units against every rule of a Limiter, atomically; only
-- when every rule admits them are they consumed (n == 0 peeks).
-- KEYS[i]: state key of rule i (every SlidingLog rule names the same log key).
-- ARGV[1] now in µs, or "" to use TIME; ARGV[2] n; ARGV[3] mode (0 allow, 1 reset);
-- ARGV[4] number of rules R; then 5 values per rule: kind and 4 parameters:
--   1 FixedWindow   limit, window_us, 0, 0
--   2 SlidingWindow limit, buckets, bucket_us, 0
--   3 SlidingLog    limit, window_us, max log window_us, 0
--   4 drain         capacity, per_us, rate, delay (-1 none)
-- reply: {allowed (1/0), then per rule: status, remaining, retry_us, reset_us, delay_us}
if redis.replicate_commands then redis.replicate_commands() end
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local n = tonumber(ARGV[2])
local mode = ARGV[3]
local R = tonumber(ARGV[4])

if mode == '1' then
  for i = 1, R do
    local o = 4 + (i - 1) * 5
    if tonumber(ARGV[o + 1]) == 1 then
      fixed_reset(KEYS[i], tonumber(ARGV[o + 3]), now)
    else
      redis.call('DEL', KEYS[i])
    end
  end
  return {1}
end

local reply = {1}
local ok = true
local newest = false
for i = 1, R do
  local o = 4 + (i - 1) * 5
  local kind = tonumber(ARGV[o + 1])
  local a, b, c, d = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5])
  local v
  if kind == 1 then
    v = fixed_check(KEYS[i], a, b, now, n)
  elseif kind == 2 then
    v = sliding_check(KEYS[i], a, b, c, now, n)
  elseif kind == 3 then
    if newest == false then newest = log_newest(KEYS[i]) end
    v = log_check(KEYS[i], a, b, now, n, newest)
  else
    v = drain_check(KEYS[i], a, b, c, d, now, n)
  end
  if v[1] ~= 1 then ok = false end
  for j = 1, 5 do reply[#reply + 1] = v[j] end
end

if ok and n > 0 then
  local logged = false
  for i = 1, R do
    local o = 4 + (i - 1) * 5
    local kind = tonumber(ARGV[o + 1])
    local a, b, c = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
    if kind == 1 then
      fixed_commit(KEYS[i], a, b, now, n)
    elseif kind == 2 then
      sliding_commit(KEYS[i], b, c, now, n)
    elseif kind == 3 then
      if not logged then
        log_commit(KEYS[i], c, now, n, newest)
        logged = true
      end
    else
      drain_commit(KEYS[i], a, b, c, now, n)
    end
  end
else
  reply[1] = 0
end
return reply
