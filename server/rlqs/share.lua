-- share.lua: record one data plane's demand for an RLQS bucket and size its
-- share of the bucket's limit, against the demands and shares of the whole
-- fleet (every floodgate server on this Redis). Mirrored step for step by
-- quotaShareMemory in fleet.go, whose comment explains the policy.
-- KEYS[1] the bucket's fleet: a hash, member (a data plane's stream) ->
--   "demand:grant:expiry:burst:holdB:holdF:holdUntil" (an older server's
--   "demand:grant:expiry" is read too). demand in thousandths of a request
--   per second; grant (the share), burst (the token bucket's max_tokens) and
--   holdB, holdF in thousandths of a request per unit of the limit; times in
--   µs.
-- ARGV[1] now µs or "" for TIME; ARGV[2] member; ARGV[3] its demand; ARGV[4]
--   the limit; ARGV[5] the assignment's time to live, µs; ARGV[6] the
--   budget (the limit less the reserve); ARGV[7] the even part of the
--   budget; ARGV[8] "1" on the member's first report of the bucket; ARGV[9]
--   the limit's unit, µs; ARGV[10] the reserve.
-- reply: {grant, members (live ones, this one included), total demand, burst}
-- Integers stay below 2^53 (limits below 2^32 requests per unit; demands
-- capped by the caller at 2^40), except the proportional part, computed in
-- doubles and floored.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local member, demand, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl, budget, evenPart = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local first = ARGV[8] == '1'
local unit, reserve = tonumber(ARGV[9]), tonumber(ARGV[10])

-- split: the burst of a share w, and the fill it leaves per unit.
-- A share under two a unit has no burst of its own (its bucket's one token
-- is the documented exception: a unit's window may see one more).
local function split(w)
  if w < 2000 then return 0 end
  return math.ceil(w / 11000) * 1000
end
local function fill(w, b)
  return w - b
end

local function parse(v)
  local d, g, e, b, hb, hf, hu = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if d == nil then
    d, g, e = string.match(v, '^(%d+):(%d+):(%d+)$')
    if d == nil then return nil end
    g = tonumber(g)
    b = split(g)
    return {d = tonumber(d), g = g, e = tonumber(e), b = b, hb = 0, hf = 0, hu = 0}
  end
  return {d = tonumber(d), g = tonumber(g), e = tonumber(e), b = tonumber(b),
    hb = tonumber(hb), hf = tonumber(hf), hu = tonumber(hu)}
end

-- What a member's data plane may admit in one unit's window from now on.
local function commitment(r)
  if r.hu > now then return r.hb + r.hf end
  return r.b + fill(r.g, r.b)
end

local all = redis.call('HGETALL', KEYS[1])
local n, total, others, deficit, last = 1, demand, 0, 0, now + ttl + unit
local dead = {}
local mine = nil
local live = {} -- the other live members: {name, demand}
for i = 1, #all, 2 do
  local r = parse(all[i + 1])
  if all[i] == member then
    mine = r
  elseif r == nil or (r.e + unit <= now and r.hu <= now) then
    dead[#dead + 1] = all[i]
  else
    others = others + commitment(r)
    if r.e > now then
      n = n + 1
      total = total + r.d
      live[#live + 1] = {all[i], r.d}
      local want = split(r.g)
      if want > r.b then deficit = deficit + want - r.b end
    end
    last = math.max(last, r.e + unit, r.hu)
  end
end
-- At most one field per data plane: a fleet is hundreds, not thousands.
for i = 1, #dead, 1000 do
  redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 999, #dead)))
end

if first and n > 1 then
  local avg = math.floor((total - demand) / (n - 1))
  if avg > demand then
    total, demand = total - demand + avg, avg
  end
end

-- targetOf: the target of a member of demand d.
local function targetOf(d)
  local t = math.floor(evenPart / n)
  if total > 0 then
    return t + math.floor((budget - evenPart) * d / total)
  end
  return t + math.floor((budget - evenPart) / n)
end
-- Targets of two requests a unit or more are whole requests (a token
-- bucket admits whole requests: a fraction would be lost), rounded down,
-- and the whole requests of the budget that rounding leaves go one each to
-- the members whose fractions were largest (ties: the first name in byte
-- order), so that the fleet's targets still add up to the budget.
local function whole(t)
  if t < 2000 then return t end
  return t - t % 1000
end
local function fraction(t)
  if t < 2000 then return -1 end
  return t % 1000
end
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local target = targetOf(demand)
local myFraction = fraction(target)
if myFraction >= 0 then
  local sum, ahead = whole(target), 0
  for _, o in ipairs(live) do
    local t = targetOf(o[2])
    sum = sum + whole(t)
    local f = fraction(t)
    if f > myFraction or (f == myFraction and before(o[1], member)) then ahead = ahead + 1 end
  end
  target = whole(target)
  if ahead < math.floor((budget - sum) / 1000) then target = target + 1000 end
end

-- This member's assignment: w1, b1, and what it commits (hb + hf).
local w1, b1, hb, hf, hu = 0, 0, 0, 0, 0
local inForce = false
if mine ~= nil and (mine.e + unit > now or mine.hu > now) then
  w1, b1 = mine.g, mine.b
  inForce = mine.e > now
  if mine.hu > now then
    hb, hf, hu = mine.hb, mine.hf, mine.hu
  else
    hb, hf = b1, fill(w1, b1)
  end
end
local c1 = hb + hf
local avail = limit - others
-- Growing leaves the reserve and the others' reduced bursts to shrinks; a
-- newcomer takes at most half of what is free beyond those bursts and half
-- the reserve, so that in a crowd of newcomers each gets something and a
-- shrink always has room.
local growth = avail - reserve - deficit
local newcomer = math.floor((avail - deficit - math.floor(reserve / 2)) / 2)

local function cost(w, b)
  return hb + b + math.max(hf, fill(w, b))
end
-- largest: the largest share in [lo, hi] whose change costs at most cap.
local function largest(lo, hi, cap)
  if lo > hi or cost(lo, split(lo)) > cap then return -1 end
  while lo < hi do
    local mid = lo + math.ceil((hi - lo) / 2)
    if cost(mid, split(mid)) <= cap then lo = mid else hi = mid - 1 end
  end
  return lo
end

local grant, burst, change = w1, b1, true
-- Kept: a target at most 2% under the share, or less than a token or
-- 0.5% over it.
local within = (target <= w1 and (w1 - target) * 50 <= w1) or
  (target > w1 and target - w1 < 1000 and (target - w1) * 200 < w1)
if inForce and b1 == split(w1) and within and c1 <= avail then
  change = false
elseif inForce and target <= w1 then
  -- A shrink (or a burst restored): a bucket starting full costs its burst
  -- for a unit, which may use all the room; short of room for the whole
  -- burst, a smaller one for now, restored later.
  local bt = split(target)
  local b = math.min(bt, math.floor((avail - c1) / 1000) * 1000)
  if cost(target, bt) <= avail then
    grant, burst = target, bt
  elseif b >= 1000 and (target < w1 or b > b1) and cost(target, b) <= avail then
    grant, burst = target, b
  elseif c1 <= avail then
    change = false
  else
    grant, burst = 0, 0
  end
elseif inForce then
  -- A growth: it must leave the reserve and the others' missing bursts free.
  local w = largest(w1, target, growth)
  if w > 0 and (w - w1 >= 1000 or (w - w1) * 200 >= w1) then
    grant, burst = w, split(w)
  elseif b1 < split(w1) and cost(w1, split(w1)) <= avail then
    grant, burst = w1, split(w1) -- no room to grow: restore the burst
  elseif c1 <= avail then
    change = false
  else
    grant, burst = 0, 0
  end
else
  -- No assignment in force: as much of the target as fits.
  local w = math.max(largest(0, target, math.max(growth, newcomer)), 0)
  grant, burst = w, split(w)
end
if change and inForce and grant == w1 and burst == b1 then change = false end
if change then
  hb, hf, hu = hb + burst, math.max(hf, fill(grant, burst)), now + unit
end

redis.call('HSET', KEYS[1], member, string.format('%d:%d:%d:%d:%d:%d:%d', demand, grant, now + ttl, burst, hb, hf, hu))
last = math.max(last, now + ttl + unit, hu)
redis.call('PEXPIRE', KEYS[1], math.floor((last - now) / 1000) + 1000)
return {grant, n, total, burst}
