-- concurrency.lua: ConcurrencyLimiter (nginx limit_conn). A sorted set of
-- lease ids scored by their deadline (µs); a lease past its deadline no longer
-- counts, so a holder that dies without releasing frees its slot.
-- KEYS[1] lease set; ARGV[1] now in µs or "" for TIME; ARGV[2] op ("a" acquire,
-- "r" release); ARGV[3] lease id; ARGV[4] limit; ARGV[5] lease_us.
-- reply (acquire): {status (1 allowed, 0 denied, -1 never), remaining, retry_us, reset_us}
-- reply (release): 1 when the lease was held, 0 otherwise.
-- Safe to run twice (a client's resend after a lost reply): the lease id is
-- chosen by the caller, so a replayed acquire finds its own live lease and
-- answers "allowed" again without taking a second slot or moving the
-- deadline; a replayed release removes nothing more.
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
if ARGV[2] == 'r' then
  return redis.call('ZREM', key, ARGV[3])
end
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local limit, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local function istr(x) return string.format('%d', x) end
local live = redis.call('ZRANGEBYSCORE', key, '(' .. istr(now), '+inf', 'WITHSCORES')
local c = #live / 2
local reset = 0
if c > 0 then reset = tonumber(live[#live]) - now end
if limit < 1 then return {-1, 0, -1, reset} end
local mine = redis.call('ZSCORE', key, ARGV[3])
if mine and tonumber(mine) > now then return {1, limit - c, 0, reset} end
if c >= limit then return {0, limit - c, tonumber(live[2]) - now, reset} end
redis.call('ZREMRANGEBYSCORE', key, '-inf', istr(now))
local deadline = now + lease
redis.call('ZADD', key, istr(deadline), ARGV[3])
if deadline - now > reset then reset = deadline - now end
redis.call('PEXPIRE', key, math.ceil(reset / 1000))
return {1, limit - c - 1, 0, reset}
