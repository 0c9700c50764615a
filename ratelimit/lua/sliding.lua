-- sliding.lua: SlidingWindow. A hash of sub-window counters: field <bucket id>
-- holds the units admitted in bucket [id × w, (id + 1) × w); "t" is the sum of
-- the buckets in [lo, lo + B], "lo" the oldest bucket that may still count and
-- "hi" the newest bucket written. A unit in bucket id counts while the current
-- bucket is at most id + B. Old buckets are subtracted once each: O(1)
-- amortised per call. Mirrored by state_memory.go.

-- sliding_check returns status, remaining, retry_us, reset_us, delay_us, and
-- for sliding_commit a table {total, lo, hi, cur, gone fields, cleared}.
local function sliding_check(key, limit, buckets, w, now, n)
  local cur = fdiv(now, w)
  local total, lo, hi
  local gone, cleared = {}, false
  local st = redis.call('HMGET', key, 't', 'lo', 'hi')
  if not st[1] then
    total, lo, hi = 0, cur - buckets, cur - buckets - 1
  else
    total, lo, hi = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
    if cur < lo then cur = lo end
    local newlo = cur - buckets
    if newlo > lo then
      if newlo > hi then
        total, cleared = 0, true
      else
        for id = lo, newlo - 1 do gone[#gone + 1] = istr(id) end
        local vals = redis.call('HMGET', key, unpack(gone))
        for i = 1, #vals do total = total - tonumber(vals[i] or '0') end
      end
      lo = newlo
    end
  end
  local reset = 0
  if total > 0 then reset = (hi + buckets + 1) * w - now end
  if n > limit then return -1, limit - total, -1, reset, 0 end
  if total + n > limit then
    local need = total + n - limit
    local fields = {}
    for id = lo, hi do fields[#fields + 1] = istr(id) end
    local vals = redis.call('HMGET', key, unpack(fields))
    local acc = 0
    for i = 1, #vals do
      acc = acc + tonumber(vals[i] or '0')
      if acc >= need then
        return 0, limit - total, (lo + i + buckets) * w - now, reset, 0
      end
    end
    return 0, limit - total, -1, reset, 0 -- unreachable: need <= total
  end
  local nhi = hi
  if n > 0 then
    if cur > nhi then nhi = cur end
    reset = (nhi + buckets + 1) * w - now
  end
  return 1, limit - total - n, 0, reset, 0, {total + n, lo, nhi, cur, gone, cleared}
end

local function sliding_commit(key, buckets, w, now, n, x)
  if x[6] then
    redis.call('DEL', key)
  elseif #x[5] > 0 then
    redis.call('HDEL', key, unpack(x[5]))
  end
  redis.call('HINCRBY', key, istr(x[4]), n)
  redis.call('HSET', key, 't', istr(x[1]), 'lo', istr(x[2]), 'hi', istr(x[3]))
  redis.call('PEXPIRE', key, pttl((x[3] + buckets + 1) * w - now))
end
