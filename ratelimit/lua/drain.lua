-- drain.lua: a bucket whose level drains linearly; TokenBucket, LeakyBucket and
-- GCRA are all this bucket. The level is kept in units of requests × per (µs),
-- draining rate units per µs, so every step is exact integer arithmetic.
-- State (string): "tat" or "tat rem": the level at time t is
-- max(0, (tat - t) × rate - rem), i.e. tat is the µs at which the bucket is
-- empty, rounded up, and rem the rounding. Mirrored by state_memory.go.

-- drain_check returns status (1 allowed, 0 denied, -1 never), remaining,
-- retry_us, reset_us, delay_us, and the new level for drain_commit.
local function drain_check(key, capacity, per, rate, delay, now, n)
  local level = 0
  local v = redis.call('GET', key)
  if v then
    local tat, rem
    local sp = string.find(v, ' ', 1, true)
    if sp then
      tat = tonumber(string.sub(v, 1, sp - 1))
      rem = tonumber(string.sub(v, sp + 1))
    else
      tat = tonumber(v)
      rem = 0
    end
    local d = tat - now
    if d > 0 then
      local dmax = cdiv(capacity * per, rate)
      if d > dmax then d = dmax end
      level = d * rate - rem
      if level < 0 then level = 0 end
    end
  end
  local full = capacity * per
  local remaining = fdiv(full - level, per)
  if n > capacity then return -1, remaining, -1, cdiv(level, rate), 0 end
  local nl = level + n * per
  if nl > full then return 0, remaining, cdiv(nl - full, rate), cdiv(level, rate), 0 end
  local dl = 0
  if delay >= 0 and n > 0 then
    local ex = nl - per - delay * per
    if ex > 0 then dl = cdiv(ex, rate) end
  end
  return 1, fdiv(full - nl, per), 0, cdiv(nl, rate), dl, nl
end

-- drain_commit stores the level nl that drain_check computed.
local function drain_commit(key, rate, now, nl)
  local wait = cdiv(nl, rate)
  local rem = wait * rate - nl
  local v = istr(now + wait)
  if rem ~= 0 then v = v .. ' ' .. istr(rem) end
  redis.call('SET', key, v, 'PX', pttl(wait))
end
