-- sliding.lua: SlidingWindow. A hash of sub-window counters: field <bucket id>
-- holds the units admitted in bucket [id × w, (id + 1) × w); "t" is the sum of
-- the buckets in [lo, lo + B], "lo" the oldest bucket that may still count and
-- "hi" the newest bucket written. A unit in bucket id counts while the current
-- bucket is at most id + B. Old buckets are subtracted once each: O(1)
-- amortised per call.
-- verdict: {status, remaining, retry_us, reset_us, delay_us}

-- sliding_view returns total, lo, hi, cur and the fields that fell out.
local function sliding_view(key, buckets, w, now)
  local cur = fdiv(now, w)
  local st = redis.call('HMGET', key, 't', 'lo', 'hi')
  if not st[1] then return 0, cur - buckets, cur - buckets - 1, cur, {}, false end
  local total, lo, hi = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
  if cur < lo then cur = lo end
  local newlo = cur - buckets
  local gone = {}
  if newlo > lo then
    if newlo > hi then return 0, newlo, hi, cur, gone, true end
    for id = lo, newlo - 1 do gone[#gone + 1] = istr(id) end
    local vals = redis.call('HMGET', key, unpack(gone))
    for i = 1, #vals do total = total - tonumber(vals[i] or '0') end
    lo = newlo
  end
  return total, lo, hi, cur, gone, false
end

local function sliding_check(key, limit, buckets, w, now, n)
  local total, lo, hi, cur = sliding_view(key, buckets, w, now)
  local reset = 0
  if total > 0 then reset = (hi + buckets + 1) * w - now end
  if n > limit then return {-1, limit - total, -1, reset, 0} end
  if total + n > limit then
    local need = total + n - limit
    local fields = {}
    for id = lo, hi do fields[#fields + 1] = istr(id) end
    local vals = redis.call('HMGET', key, unpack(fields))
    local acc = 0
    for i = 1, #vals do
      acc = acc + tonumber(vals[i] or '0')
      if acc >= need then
        return {0, limit - total, (lo + i - 1 + buckets + 1) * w - now, reset, 0}
      end
    end
    return {0, limit - total, -1, reset, 0} -- unreachable: need <= total
  end
  if n > 0 then
    if cur > hi then hi = cur end
    reset = (hi + buckets + 1) * w - now
  end
  return {1, limit - total - n, 0, reset, 0}
end

local function sliding_commit(key, buckets, w, now, n)
  local total, lo, hi, cur, gone, cleared = sliding_view(key, buckets, w, now)
  if cleared then
    redis.call('DEL', key)
  elseif #gone > 0 then
    redis.call('HDEL', key, unpack(gone))
  end
  if cur > hi then hi = cur end
  redis.call('HINCRBY', key, istr(cur), n)
  redis.call('HSET', key, 't', istr(total + n), 'lo', istr(lo), 'hi', istr(hi))
  redis.call('PEXPIRE', key, pttl((hi + buckets + 1) * w - now))
end
