-- fixed.lua: FixedWindow. One counter per epoch-aligned window, in the key
-- "<key>:<window id>", so an old window's counter is never read again whatever
-- Redis does with its TTL. Mirrored by state_memory.go.

-- fixed_check returns status, remaining, retry_us, reset_us, delay_us, and the
-- new count for fixed_commit.
local function fixed_check(key, limit, window, now, n)
  local wid = fdiv(now, window)
  local c = tonumber(redis.call('GET', key .. ':' .. istr(wid)) or '0')
  local left = (wid + 1) * window - now
  local reset = 0
  if c > 0 then reset = left end
  if n > limit then return -1, limit - c, -1, reset, 0 end
  if c + n > limit then return 0, limit - c, left, reset, 0 end
  if c + n > 0 then reset = left end
  return 1, limit - c - n, 0, reset, 0, c + n
end

local function fixed_commit(key, window, now, count)
  local wid = fdiv(now, window)
  redis.call('SET', key .. ':' .. istr(wid), istr(count), 'PX', pttl((wid + 1) * window - now))
end

local function fixed_reset(key, window, now)
  redis.call('DEL', key .. ':' .. istr(fdiv(now, window)))
end
