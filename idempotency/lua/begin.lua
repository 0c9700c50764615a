-- begin.lua: look at an idempotency key, and claim it when it is free.
-- KEYS[1] record hash {s state: 'r' running | 'd' done | 'a' aborted (free); o owner (kept when done, so
--   that a replayed complete is recognised); d deadline µs (end
--   of the lease while running, of the TTL when done); f fingerprint; v value;
--   e '1' when an error was stored, else '0'; m error text; w '1' when a waiter
--   wants a wake-up}
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] fingerprint; ARGV[4] lease µs;
-- ARGV[5] waiting ('1': mark that a waiter wants a wake-up)
-- reply: {0} claimed; {1, lease_left_us} in flight; {2, value, failed, message} done;
-- {3} used with another fingerprint.
-- Safe to run twice: owner is drawn once per Do call, so a second run of a
-- claim finds its own running record and answers {0} again.
-- Deadlines stay below 2^53 µs (year 2255) and are formatted with %d.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 's', 'd', 'f', 'v', 'e', 'm', 'o')
if h[1] and h[1] ~= 'a' and tonumber(h[2]) > now then
  if h[3] ~= ARGV[3] then return {3} end
  if h[1] == 'd' then return {2, h[4], tonumber(h[5]), h[6]} end
  -- A replay of the claim that made this record (owner is unique per call).
  if h[7] == ARGV[2] then return {0} end
  if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'w', '1') end
  return {1, tonumber(h[2]) - now}
end
-- Free, aborted, expired, or a dead runner's lease that ran out: claim it.
local lease = tonumber(ARGV[4])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'r', 'o', ARGV[2], 'd', string.format('%d', now + lease), 'f', ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + 1000)
return {0}
