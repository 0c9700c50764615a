-- rlqs_share.lua: record one data plane's demand for an RLQS bucket and
-- grant it its share of the bucket's limit, against the demands and grants
-- of the whole fleet (every floodgate server on this Redis). Mirrored by
-- quotaShareMemory in rlqs_fleet.go.
-- KEYS[1] the bucket's fleet: a hash, member (a data plane's stream) ->
--   "demand:grant:expiry_us", demand in thousandths of a request per second
--   (only its proportion to the others' matters), grant in thousandths of a
--   request per unit of the limit.
-- ARGV[1] now µs or "" for TIME; ARGV[2] member; ARGV[3] its demand; ARGV[4]
--   the limit (thousandths of a request per unit); ARGV[5] how long the grant
--   lasts (the assignment's time to live), µs; ARGV[6] the budget: what the
--   fleet's shares add up to at steady state, the limit less a reserve for
--   newcomers; ARGV[7] the even part of the budget, split evenly among the
--   members (the floor each gets whatever its demand); the rest is split in
--   proportion to demand; ARGV[8] "1" when this is the member's first report
--   of the bucket (Envoy's, sent at the bucket's first request, tells little
--   of its demand): it is then taken to want at least the others' average.
-- reply: {grant, members (live ones, this one included), total demand}
-- Members whose expiry has passed count for nothing and are deleted. The
-- grant never makes the live grants sum to more than the limit: it is capped
-- by what the other members' live grants leave (free). A capped member keeps
-- its live grant (which fits in free), or takes half of free if that is
-- more, so that in a crowd of newcomers each gets something. Integers stay below 2^53
-- (limits below 2^32 requests per unit; demands capped by the caller at
-- 2^40, so that a fleet of 8192 data planes sums exactly), except the
-- proportional part, computed in doubles and floored (the cap keeps the
-- grant exact where it matters).
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

local all = redis.call('HGETALL', KEYS[1])
local n, total, others, last = 1, demand, 0, now + ttl
local dead = {}
local prev = 0 -- this member's live grant
for i = 1, #all, 2 do
  local d, g, exp = string.match(all[i + 1], '^(%d+):(%d+):(%d+)$')
  exp = tonumber(exp)
  if all[i] == member then
    if exp ~= nil and exp > now then prev = tonumber(g) end
  else
    if exp == nil or exp <= now then
      dead[#dead + 1] = all[i]
    else
      n = n + 1
      total = total + tonumber(d)
      others = others + tonumber(g)
      if exp > last then last = exp end
    end
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

local grant = math.floor(evenPart / n)
if total > 0 then
  grant = grant + math.floor((budget - evenPart) * demand / total)
else
  grant = grant + math.floor((budget - evenPart) / n)
end
local free = limit - others
if grant > free then
  -- Capped: keep the live grant, or take half of what is free, leaving the
  -- rest to the next newcomer.
  -- (A reload may have lowered the limit under the live grants: never more
  -- than free.)
  grant = math.min(math.max(prev, math.floor(free / 2)), free)
end
if grant < 0 then grant = 0 end

redis.call('HSET', KEYS[1], member, string.format('%d:%d:%d', demand, grant, now + ttl))
redis.call('PEXPIRE', KEYS[1], math.floor((last - now) / 1000) + 1000)
return {grant, n, total}
