-- servers.lua: one floodgate server's heartbeat, and the count of the live
-- servers sharing this store (Servers in servers.go).
-- KEYS[1] the fleet: a sorted set, member (a server) -> its last heartbeat, µs
-- ARGV[1] now µs or "" for TIME; ARGV[2] member; ARGV[3] how long a
--   heartbeat keeps a server live, µs
-- reply: {the live servers, this one included}
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local live = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - live)
redis.call('PEXPIRE', KEYS[1], math.floor(live / 1000) * 2)
return {redis.call('ZCARD', KEYS[1])}
