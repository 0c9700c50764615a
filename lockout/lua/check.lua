-- check.lua: the status of a key; read-only. Mirrored by memory.go
-- (memCheck).
-- KEYS[1] ban, KEYS[2] failure log, as in fail.lua
-- ARGV[1] now µs or "" for TIME; ARGV[2] max failures; ARGV[3] window µs;
-- ARGV[4] ban µs (unused)
-- reply: {banned (1/0), remaining, retry_after µs}
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local max, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local untl = tonumber(redis.call('GET', KEYS[1]) or '0')
if untl > now then return {1, 0, untl - now} end
-- Failures after now - window count.
local n = redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%d', now - window), '+inf')
local left = max - n
if left < 1 then left = 1 end -- never: the log holds at most max-1 failures
return {0, left, 0}
