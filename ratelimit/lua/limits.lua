-- limits.lua: decide one or more requests, each n units for one user key
-- against every rule of its Limiter, atomically: only when every rule of every
-- request admits are they consumed. Limiter.AllowN (when no fast path
-- applies), Reset and AllowAll all run it. Mirrored by state_memory.go.
--
-- State: one key per Limiter and user key. A Limiter whose rules are all
-- FixedWindow or drain rules keeps a string ("s" layout): its rules' values in
-- field order (a rule's field is its 0-based position), separated by spaces.
-- Any other keeps a hash ("h" layout) whose fields belong to its rules: field
-- F holds a drain or fixed-window rule's value, a SlidingWindow rule uses Ft
-- (total), Fl (oldest bucket that may count), Fh (newest bucket written) and
-- <slot><F in 3 digits> (the units of the bucket in that slot of a ring of
-- Buckets+1: an integer field name, which the hash stores compactly). Values:
--   drain (TokenBucket, LeakyBucket, GCRA): the level L at time t in units of
--     requests × per µs; it drains rate units per µs. Neither the capacity
--     nor the rate is stored, so both may change and the level carries.
--   FixedWindow: the count c of window w (epoch-aligned, window µs).
-- codec.lua, which runs before this script, encodes both.
-- SlidingLog rules share a sorted set (the second key of the request) of
-- admitted units scored by admission time.
--
-- KEYS: per request its state key, then its log key when it has SlidingLog rules.
-- ARGV[1] now in µs, or "" to use TIME; ARGV[2] mode: "0" decide and commit
-- when all admit, "c" check (commit nothing, reply as for a denial), "f"
-- charge (see below), "r" reset (delete every request's state), and for
-- quota leases (leased.go; one
-- request, no SlidingLog rule) "g<min>:<hold>" grant and "u<t>:<info>..."
-- return:
--   "g<min>:<hold>": take g units, the request's n or less: g = min(n,
--     Remaining of every rule), but at least min (so g = min, denied, when
--     fewer are left), after raising each drain rule's level to at least
--     what it drains in hold µs (but no higher than leaves room for n); when
--     every rule drains, the raise's whole units are added to g instead (the
--     level raised by them, as a grant of them would); then decide and commit g as mode "0" would
--     (a denial changes nothing). The reply is mode "0"'s
--     followed by now, g and per rule the grant's mark: a drain rule's level
--     after the grant, a FixedWindow's window id, a SlidingWindow's bucket id.
--   "u<t>:<mark 1>:...": give back n units of the grant at time t with those
--     marks, where the rule allows (see refund below), once: one more key,
--     after the request's, marks it done. reply: {changed (1/0)}.
-- Then per request: n, number of rules R, layout ("s" or "h"), number of keys
-- (1 or 2), and R × 6 rule arguments: kind, field, then
--   1 FixedWindow   limit, window_us, 0, 0
--   2 SlidingWindow limit, buckets, bucket_us, 0
--   3 SlidingLog    limit, window_us, longest log window_us, 0
--   4 drain         capacity, per_us, rate, delay (-1 none)
-- Requests that name the same state key (the same user key and the same rule
-- identities: kinds, grains and names, whatever the limits) are checked
-- against it with the sum of their n, and it is committed once.
-- reply: {allowed (1/0: every request admitted), then per rule of every
-- request, in order: status (1 allowed, 0 denied, -1 never), remaining,
-- retry_us, reset_us, delay_us}. When not allowed, and always in mode "c", every
-- rule that admits reports a peek (n = 0): nothing was consumed.
-- Mode "f" (Limiter.Charge) decides as "0"; when every rule admits, it is
-- mode "0". Otherwise it commits anyway, each rule taking the units past its
-- limit (debt): a drain rule's level goes past full (at most MAX_LEVEL, in
-- the debt form of codec.lua), a window's count past its limit (at most
-- MAX_COUNT), and the log gets at most 2 × its largest limit + 1 entries
-- (more could change no decision, only the debt reported). The reply is
-- then {0, then per rule what a peek (n = 0) after the commit reports}: a
-- rule in debt reports status 0, remaining < 0 (minus the debt in units),
-- and retry_us until it is out of debt.
-- Integers are Lua doubles below 2^53 (New checks the rule parameters), so
-- math.floor and math.ceil of a quotient are exact.
-- Needs Redis >= 5 (effects replication, so that TIME may precede writes).
local floor, ceil, tonumber, istr = math.floor, math.ceil, tonumber, function(x) return string.format('%d', x) end
local mode = ARGV[2]
-- A charge (mode "f") makes a check that denies compute its commit anyway.
local force = mode == 'f'
-- What a charge may leave at most: a drain rule's level (so that a level
-- plus a full bucket stays below 2^53) and a window's count.
local MAX_LEVEL, MAX_COUNT = 4503599627370496, 9007199254740992 -- 2^52, 2^53

-- Parse the requests. Rule k: P[6k-5 .. 6k] its arguments; RQ[k] its request.
-- Request q: its rules first[q] .. last[q], state key SK[q], log key LK[q],
-- layout LY[q].
local P, RQ, first, last, SK, LK, LY = {}, {}, {}, {}, {}, {}, {}
local N = {} -- per state and log key: the units of every request naming it
local k, q, i, kn = 0, 0, 3, 0
while i <= #ARGV do
  local n, r, nk = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 3])
  q = q + 1
  LY[q] = ARGV[i + 2]
  i = i + 4
  SK[q] = KEYS[kn + 1]
  if nk == 2 then LK[q] = KEYS[kn + 2] end
  kn = kn + nk
  first[q] = k + 1
  for _ = 1, r do
    k = k + 1
    local o = (k - 1) * 6
    P[o + 1], P[o + 2] = tonumber(ARGV[i]), ARGV[i + 1]
    P[o + 3], P[o + 4], P[o + 5], P[o + 6] = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
    i = i + 6
    RQ[k] = q
  end
  last[q] = k
  for _, key in ipairs({SK[q], LK[q]}) do N[key] = (N[key] or 0) + n end
end
local op = string.sub(mode, 1, 1)
if kn + (op == 'u' and 1 or 0) ~= #KEYS then
  return redis.error_reply('ERR limits.lua: ' .. #KEYS .. ' keys for ' .. kn .. ' declared')
end

if mode == 'r' then
  for r = 1, q do
    redis.call('DEL', SK[r])
    if LK[r] then redis.call('DEL', LK[r]) end
  end
  return {1}
end

local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end

-- S[key]: the state of a state key as a table field → value.
local S = {}
local function state(r)
  local key = SK[r]
  local s = S[key]
  if s == nil then
    s = {}
    if LY[r] == 's' then
      local v = redis.call('GET', key)
      if v then
        local f, p = 0, 1
        while true do
          local e = string.find(v, ' ', p, true)
          s[istr(f)] = string.sub(v, p, (e or 0) - 1)
          if not e then break end
          f, p = f + 1, e + 1
        end
      end
    else
      local kv = redis.call('HGETALL', key)
      for j = 1, #kv, 2 do s[kv[j]] = kv[j + 1] end
    end
    S[key] = s
  end
  return s
end
local function value(r, f) return state(r)[f] end

-- The checks return status, remaining, retry_us, reset_us, delay_us, and for
-- an admitting check with n > 0 what its commit stores.

local function drain_check(r, f, capacity, per, rate, delay, n)
  local full = capacity * per
  local level = 0
  local v = value(r, f)
  if v then
    local t
    t, level = drain_decode(v, now)
    local debt = level < 0 -- codec.lua's debt form: not capped at full
    if debt then level = -level end
    local d = now - t
    if d > 0 then level = level - d * rate end
    if level < 0 then level = 0 elseif level > full and not debt then level = full end
  end
  local remaining = floor((full - level) / per)
  if force and (n > capacity or level + n * per > full) then
    local nl = MAX_LEVEL
    if n <= floor((MAX_LEVEL - level) / per) then nl = level + n * per end
    local wait = ceil(nl / rate)
    return 0, remaining, 0, wait, 0, {rate, now + wait, nl, true} -- a debt: the commit writes drain_debt
  end
  if n > capacity then return -1, remaining, -1, ceil(level / rate), 0 end
  local nl = level + n * per
  if nl > full then return 0, remaining, ceil((nl - full) / rate), ceil(level / rate), 0 end
  local dl = 0
  if delay >= 0 and n > 0 then
    local ex = nl - per - delay * per
    if ex > 0 then dl = ceil(ex / rate) end
  end
  local wait = ceil(nl / rate)
  return 1, floor((full - nl) / per), 0, wait, dl, {rate, now + wait, nl} -- the commit encodes nl
end

local function fixed_check(r, f, limit, window, n)
  local wid = floor(now / window)
  local c = 0
  local v = value(r, f)
  if v then c = fixed_count(v, wid) end
  local left = (wid + 1) * window - now
  local reset = 0
  if c > 0 then reset = left end
  if force and (n > limit or c + n > limit) then
    local nc = MAX_COUNT
    if n <= MAX_COUNT - c then nc = c + n end
    return 0, limit - c, 0, left, 0, {fixed_encode(wid, nc), now + left, wid}
  end
  if n > limit then return -1, limit - c, -1, reset, 0 end
  if c + n > limit then return 0, limit - c, left, reset, 0 end
  if c + n > 0 then reset = left end
  return 1, limit - c - n, 0, reset, 0, {fixed_encode(wid, c + n), now + left, wid}
end

-- bucket returns the field of bucket id of the SlidingWindow rule in field
-- f with buckets+1 slots: its slot (id mod buckets+1, as the memory backend's
-- ring) followed by f in 3 digits, an integer that Redis's hash keeps in a
-- few bytes. The live buckets lo..hi (hi - lo <= buckets) have distinct slots.
local function bucket(f, id, slots) return istr(id % slots) .. string.format('%03d', f) end

local function sliding_check(r, f, limit, buckets, w, n)
  local s = state(r)
  local cur = floor(now / w)
  local total, lo, hi = tonumber(s[f .. 't']), tonumber(s[f .. 'l']), tonumber(s[f .. 'h'])
  local gone = {}
  if not total then
    total, lo, hi = 0, cur - buckets, cur - buckets - 1
  else
    if cur < lo then cur = lo end
    local newlo = cur - buckets
    if newlo > lo then
      if newlo > hi then
        total = 0
        for id = lo, hi do gone[#gone + 1] = bucket(f, id, buckets + 1) end
      else
        for id = lo, newlo - 1 do
          local g = bucket(f, id, buckets + 1)
          gone[#gone + 1] = g
          total = total - tonumber(s[g] or '0')
        end
      end
      lo = newlo
    end
  end
  local reset = 0
  if total > 0 then reset = (hi + buckets + 1) * w - now end
  local st = 1
  if force and (n > limit or total + n > limit) then
    st = 0 -- a charge past the limit: commit n (at most up to MAX_COUNT) anyway
    if n > MAX_COUNT - total then n = MAX_COUNT - total end
  else
    if n > limit then return -1, limit - total, -1, reset, 0 end
    if total + n > limit then
      local need, acc = total + n - limit, 0
      for id = lo, hi do
        acc = acc + tonumber(s[bucket(f, id, buckets + 1)] or '0')
        if acc >= need then return 0, limit - total, (id + buckets + 1) * w - now, reset, 0 end
      end
      return 0, limit - total, -1, reset, 0 -- unreachable: need <= total
    end
  end
  if n > 0 or st == 0 then -- a charge commits even 0 units (at MAX_COUNT)
    if cur > hi then hi = cur end
    reset = (hi + buckets + 1) * w - now
  end
  -- The current bucket's slot may still hold a bucket that just left the
  -- window (deleted below): that count is not the current bucket's.
  local b = bucket(f, cur, buckets + 1)
  local had = tonumber(s[b] or '0')
  for _, g in ipairs(gone) do
    if g == b then had = 0 end
  end
  return st, limit - total - n, 0, reset, 0,
    {gone, f .. 't', istr(total + n), f .. 'l', istr(lo), f .. 'h', istr(hi), b, istr(had + n), now + reset, cur}
end

local newest = {} -- per log key: its newest entry's time, or false
local function log_newest(key)
  local nw = newest[key]
  if nw == nil then
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    nw = e[2] and tonumber(e[2]) or false
    newest[key] = nw
  end
  return nw
end

local function log_check(r, limit, window, n)
  local key = LK[r]
  local nw = log_newest(key)
  local c = redis.call('ZCOUNT', key, '(' .. istr(now - window), '+inf')
  local reset = 0
  if c > 0 then reset = nw + window - now end
  if force and (n > limit or c + n > limit) then return 0, limit - c, 0, reset, 0, true end
  if n > limit then return -1, limit - c, -1, reset, 0 end
  if c + n > limit then
    local e = redis.call('ZRANGEBYSCORE', key, '(' .. istr(now - window), '+inf', 'WITHSCORES', 'LIMIT', c + n - limit - 1, 1)
    return 0, limit - c, tonumber(e[2]) + window - now, reset, 0
  end
  if n > 0 then
    if not nw or nw < now then nw = now end
    reset = nw + window - now
  end
  return 1, limit - c - n, 0, reset, 0, true
end

local function check(k, n)
  local o = (k - 1) * 6
  local kind, f, a, b, c, d = P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5], P[o + 6]
  local r = RQ[k]
  if kind == 4 then return drain_check(r, f, a, b, c, d, n)
  elseif kind == 1 then return fixed_check(r, f, a, b, n)
  elseif kind == 2 then return sliding_check(r, f, a, b, c, n)
  end
  return log_check(r, a, b, n)
end

-- refund gives back u units of a grant made at tg, whose marks are M (one
-- per rule of request 1), where each rule allows; it returns 1 when it
-- changed the state. The units were taken from the budget and never used,
-- so the state after a refund is one that a smaller grant could have left:
--   drain: only when nothing else changed the level since the grant (the
--     level now is the grant's, drained); the level then drops by u units,
--     to no less than 0: exactly the level a grant of u fewer units leaves.
--   FixedWindow: only in the grant's window; the count drops by u, to no
--     less than 0.
--   SlidingWindow: while the grant's bucket is in the window; its count and
--     the total drop by u, to no less than the bucket's count.
-- Otherwise the units are dropped: a window that ended took them with it, a
-- level that others changed has them below others' units.
local function refund(tg, M, u)
  -- The last key marks this give-back as done, so that a resent one (a
  -- client's retry after a lost reply) gives nothing back twice.
  local done = KEYS[#KEYS]
  if redis.call('EXISTS', done) == 1 then return 0 end
  local s = state(1)
  local changed = false
  for k = first[1], last[1] do
    local o = (k - 1) * 6
    local kind, f, a, b, c = P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5]
    local mark = M[k - first[1] + 1]
    if kind == 4 and s[f] then -- capacity a, per b, rate c
      local t, level = drain_decode(s[f], now)
      local debt = level < 0
      if debt then level = -level end
      local d = now - t
      if d > 0 then level = level - d * c end
      if level < 0 then level = 0 elseif level > a * b and not debt then level = a * b end
      local want = mark
      if now > tg then want = mark - (now - tg) * c end
      if want > 0 and level == want then
        local nl = level - u * b
        if nl < 0 then nl = 0 end
        s[f] = drain_encode(now, nl, c, math.huge) -- the key's life is not known
        changed = true
      end
    elseif kind == 1 and s[f] then -- limit a, window b
      local wid = floor(now / b)
      local cnt = fixed_count(s[f], wid)
      if wid == mark and cnt > 0 then
        cnt = cnt - u
        if cnt < 0 then cnt = 0 end
        s[f] = fixed_encode(wid, cnt)
        changed = true
      end
    elseif kind == 2 and s[f .. 't'] then -- limit a, buckets b, bucket_us c
      local lo, hi = tonumber(s[f .. 'l']), tonumber(s[f .. 'h'])
      if mark >= lo and mark <= hi and mark >= floor(now / c) - b then
        local bk = bucket(f, mark, b + 1)
        local had = tonumber(s[bk] or '0')
        local back = u
        if back > had then back = had end
        if back > 0 then
          s[bk] = istr(had - back)
          s[f .. 't'] = istr(tonumber(s[f .. 't']) - back)
          changed = true
        end
      end
    end
  end
  if not changed then return 0 end
  local key = SK[1]
  local ttl = redis.call('PTTL', key)
  if ttl <= 0 then return 0 end
  -- Past the state's life a resend finds nothing to give back to.
  redis.call('SET', done, '1', 'PX', ttl)
  if LY[1] == 's' then
    local vals = {}
    for j = 0, last[1] - first[1] do vals[j + 1] = s[istr(j)] end
    redis.call('SET', key, table.concat(vals, ' '), 'PX', ttl)
  else
    local kv = {}
    for fk, v in pairs(s) do
      kv[#kv + 1] = fk
      kv[#kv + 1] = v
    end
    redis.call('HSET', key, unpack(kv))
  end
  return 1
end

if op == 'u' then
  local M = {}
  for x in string.gmatch(string.sub(mode, 2), '[^:]+') do M[#M + 1] = tonumber(x) end
  local tg = table.remove(M, 1)
  return {refund(tg, M, N[SK[1]])}
end
local G -- the units of a grant
if op == 'g' then
  local c = string.find(mode, ':', 2, true)
  local least, hold = tonumber(string.sub(mode, 2, c - 1)), tonumber(string.sub(mode, c + 1))
  -- A drain rule's level below hold's drain is raised to it (never so far
  -- that the units asked for no longer fit), so that the lease's units have places
  -- at least hold µs ahead: see pad in grant.go.
  local s = state(1)
  -- The pad's whole units become the lease's first units (valid until their
  -- places, which come first) when every rule drains: a process that uses
  -- its lease at once (a burst) loses nothing to the pad. With a window rule
  -- beside, the pad stays consumed: the window would not count its units.
  local orig, padUnits = {}, nil
  for k = first[1], last[1] do
    if P[(k - 1) * 6 + 1] ~= 4 then padUnits = -1 end
  end
  for k = first[1], last[1] do
    local o = (k - 1) * 6
    if P[o + 1] == 4 then
      local f, per, rate = P[o + 2], P[o + 4], P[o + 5]
      local full = P[o + 3] * per
      local level = 0
      if s[f] then
        local t
        t, level = drain_decode(s[f], now)
        local debt = level < 0
        if debt then level = -level end
        local d = now - t
        if d > 0 then level = level - d * rate end
        if level < 0 then level = 0 elseif level > full and not debt then level = full end
      end
      local room = full - N[SK[1]] * per -- the most units asked for still fit
      local pad = rate * hold -- may pass 2^53, and then room, which is exact
      if pad > room then pad = room end
      local units = 0
      if level < pad then
        orig[f] = s[f] or false
        s[f] = drain_encode(now, pad, rate, 0) -- never stored
        units = math.floor((pad - level) / per)
      end
      if padUnits ~= -1 and (padUnits == nil or units < padUnits) then padUnits = units end
    end
  end
  local g = N[SK[1]]
  for k = first[1], last[1] do
    local _, rem = check(k, 0)
    if rem < g then g = rem end
  end
  if g < least then
    g = least
  elseif padUnits and padUnits > 0 then
    for f, v in pairs(orig) do
      if v then s[f] = v else s[f] = nil end
    end
    g = g + padUnits
  end
  N[SK[1]] = g
  G = g
  mode = '0'
end

-- finish appends a grant's now, units and marks to the reply.
local X = {}      -- per rule: what its check computed for the commit
local function finish(reply)
  if G then
    reply[#reply + 1] = now
    reply[#reply + 1] = G
    for k = first[1], last[1] do
      local x = X[k]
      if reply[1] == 1 and x then
        if P[(k - 1) * 6 + 1] == 2 then reply[#reply + 1] = x[11] else reply[#reply + 1] = x[3] end
      else
        reply[#reply + 1] = 0
      end
    end
  end
  return reply
end

local reply = {1}
for k = 1, #P / 6 do
  local r = RQ[k]
  local s, rem, retry, reset, dl, x = check(k, N[SK[r]])
  if s ~= 1 then reply[1] = 0 end
  X[k] = x
  local j = 1 + (k - 1) * 5
  reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = s, rem, retry, reset, dl
end

if (reply[1] == 0 and not force) or mode == 'c' then
  -- Nothing is consumed: every rule that admits reports the state as it
  -- stands, as a peek (n = 0).
  for k = 1, #P / 6 do
    local j = 1 + (k - 1) * 5
    if reply[j + 1] == 1 then
      local s, rem, retry, reset, dl = check(k, 0)
      reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = s, rem, retry, reset, dl
    end
  end
  return finish(reply)
end

-- Commit every state key once, with the summed units, as the first request
-- naming it computed.
local done = {}
for r = 1, q do
  local key = SK[r]
  if N[key] > 0 and not done[key] then
    done[key] = true
    local until_, set, del, logged = now, {}, {}, false
    for k = first[r], last[r] do
      local kind, x = P[(k - 1) * 6 + 1], X[k]
      if kind == 2 then
        if x[10] > until_ then until_ = x[10] end
      elseif kind ~= 3 and x[2] > until_ then
        until_ = x[2]
      end
    end
    for k = first[r], last[r] do
      local o = (k - 1) * 6
      local kind, x = P[o + 1], X[k]
      if kind == 3 then
        if not logged then
          logged = true
          local lk, n, maxw = LK[r], N[LK[r]], P[o + 5]
          if force then
            local most = 0 -- the largest SlidingLog limit of the request
            for j = first[r], last[r] do
              if P[(j - 1) * 6 + 1] == 3 and P[(j - 1) * 6 + 3] > most then most = P[(j - 1) * 6 + 3] end
            end
            if n > 2 * most + 1 then n = 2 * most + 1 end
          end
          redis.call('ZREMRANGEBYSCORE', lk, '-inf', istr(now - maxw))
          local seq = redis.call('ZCARD', lk)
          local args, score = {}, istr(now)
          for j = 0, n - 1 do
            args[#args + 1] = score
            args[#args + 1] = score .. ':' .. istr(seq + j)
            if #args == 2000 then -- unpack takes at most about 8000 values
              redis.call('ZADD', lk, unpack(args))
              args = {}
            end
          end
          if #args > 0 then redis.call('ZADD', lk, unpack(args)) end
          local nw = log_newest(lk)
          if not nw or nw < now then nw = now end
          redis.call('PEXPIRE', lk, ceil((nw + maxw - now) / 1000))
        end
      elseif kind == 2 then
        for _, g in ipairs(x[1]) do del[#del + 1] = g end
        for j = 2, 9 do set[#set + 1] = x[j] end
      else
        set[#set + 1] = P[o + 2]
        if kind ~= 4 then
          set[#set + 1] = x[1]
        elseif x[4] then
          set[#set + 1] = drain_debt(now, x[3])
        else
          set[#set + 1] = drain_encode(now, x[3], x[1], until_ - now)
        end
      end
    end
    if LY[r] == 's' then
      local vals = {}
      for j = 1, #set, 2 do vals[tonumber(set[j]) + 1] = set[j + 1] end
      redis.call('SET', key, table.concat(vals, ' '), 'PX', ceil((until_ - now) / 1000))
    elseif #set > 0 then
      if #del > 0 then redis.call('HDEL', key, unpack(del)) end
      redis.call('HSET', key, unpack(set))
      redis.call('PEXPIRE', key, ceil((until_ - now) / 1000))
    end
  end
end
if force and reply[1] == 0 then
  -- A charge past a limit reports the state after it, as a peek would.
  force, S, newest = false, {}, {}
  for k = 1, #P / 6 do
    local s, rem, retry, reset, dl = check(k, 0)
    local j = 1 + (k - 1) * 5
    reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = s, rem, retry, reset, dl
  end
end
return finish(reply)
