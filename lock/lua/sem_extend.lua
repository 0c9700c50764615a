-- sem_extend.lua: move the lease deadline of a Semaphore permit, by its
-- holder only; never acquires.
-- KEYS as sem_acquire.lua: KEYS[1] holders zset, KEYS[2] holds hash (the
-- others unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] ttl µs
-- reply: 1 extended, -1 not held (expired or gone).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, ttl = ARGV[2], tonumber(ARGV[3])
if tonumber(redis.call('ZSCORE', KEYS[1], owner) or '0') <= now then return -1 end
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), owner)
local ms = math.ceil(ttl / 1000)
for _, k in ipairs({KEYS[1], KEYS[2]}) do
  local pt = redis.call('PTTL', k)
  if pt ~= -2 and pt < ms then redis.call('PEXPIRE', k, ms) end
end
return 1
