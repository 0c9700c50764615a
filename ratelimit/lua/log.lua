-- log.lua: SlidingLog. A sorted set of admitted units scored by admission
-- time (µs), shared by every SlidingLog rule of a Limiter. A unit admitted at
-- ts counts for a rule of window W while now - W < ts. Mirrored by
-- state_memory.go.

-- log_newest returns the newest entry's time, or nil.
local function log_newest(key)
  local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #r == 0 then return nil end
  return tonumber(r[2])
end

-- log_check returns status, remaining, retry_us, reset_us, delay_us.
local function log_check(key, limit, window, now, n, newest)
  local c = redis.call('ZCOUNT', key, '(' .. istr(now - window), '+inf')
  local reset = 0
  if c > 0 then reset = newest + window - now end
  if n > limit then return -1, limit - c, -1, reset, 0 end
  if c + n > limit then
    local need = c + n - limit
    local r = redis.call('ZRANGEBYSCORE', key, '(' .. istr(now - window), '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
    return 0, limit - c, tonumber(r[2]) + window - now, reset, 0
  end
  if n > 0 then
    local nw = now
    if newest and newest > nw then nw = newest end
    reset = nw + window - now
  end
  return 1, limit - c - n, 0, reset, 0, true
end

local function log_commit(key, maxwindow, now, n, newest)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', istr(now - maxwindow))
  local seq = redis.call('ZCARD', key)
  local args = {}
  local score = istr(now)
  for i = 0, n - 1 do
    args[#args + 1] = score
    args[#args + 1] = score .. ':' .. istr(seq + i)
  end
  redis.call('ZADD', key, unpack(args))
  local nw = now
  if newest and newest > nw then nw = newest end
  redis.call('PEXPIRE', key, pttl(nw + maxwindow - now))
end
