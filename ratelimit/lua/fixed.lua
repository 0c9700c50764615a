-- fixed.lua: FixedWindow. One counter per epoch-aligned window, stored in
-- the declared key itself as "<window id>:<count>", so an old window's count
-- is never read again whatever Redis does with its TTL. The state lives in
-- the key the call names (not in a name built here), so that Redis Cluster
-- finds it on the node that has it while its slot migrates (ASK) and MIGRATE
-- moves it whole. Mirrored by state_memory.go.

-- fixed_count returns the count of window wid stored at key (0 for another
-- window or none).
local function fixed_count(key, wid)
  local v = redis.call('GET', key)
  if not v then return 0 end
  local w, c = string.match(v, '^(%-?%d+):(%d+)$')
  if w ~= istr(wid) then return 0 end
  return tonumber(c)
end

-- fixed_check returns status, remaining, retry_us, reset_us, delay_us, and the
-- new count for fixed_commit.
local function fixed_check(key, limit, window, now, n)
  local wid = fdiv(now, window)
  local c = fixed_count(key, wid)
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
  redis.call('SET', key, istr(wid) .. ':' .. istr(count), 'PX', pttl((wid + 1) * window - now))
end

local function fixed_reset(key)
  redis.call('DEL', key)
end
