-- multi_fast.lua: the fast path of a Limiter with several rules, all
-- FixedWindow or drain rules: limits.lua's checks and commit for one request
-- in the "s" layout, inlined: one GET and one SET, as for a single rule. It
-- runs after codec.lua. Mirrored by state_memory.go.
-- KEYS[1] the Limiter's state: the rules' values (see limits.lua) in field
-- order, separated by spaces.
-- ARGV[1] now µs or "" for TIME; ARGV[2] n; then the rules in field order:
-- a FixedWindow as "1", limit, window_us; a drain rule as "4", capacity,
-- per_us, rate, delay (-1 none).
-- reply: {allowed (1/0), then per rule in field order: status, remaining,
-- retry_us, reset_us, delay_us}
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n = tonumber(ARGV[2])
local floor, ceil, find, sub = math.floor, math.ceil, string.find, string.sub
local vals, R = {}, 0
local st = redis.call('GET', KEYS[1])
if st then
  local p = 1
  while true do
    local q = find(st, ' ', p, true)
    R = R + 1
    if not q then
      vals[R] = sub(st, p)
      break
    end
    vals[R] = sub(st, p, q - 1)
    p = q + 1
  end
end
local reply, set, life = {1}, {}, 0
local o, f = 3, 0
while o <= #ARGV do
  f = f + 1
  local kind, a, b, v = ARGV[o], tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), vals[f]
  local s, rem, retry, reset, dl = 1, 0, 0, 0, 0
  if kind == '4' then
    local per, rate = b, tonumber(ARGV[o + 3])
    local full = a * per
    local level = 0
    if v then
      local t
      t, level = drain_decode(v)
      local d = now - t
      if d > 0 then level = level - d * rate end
      if level < 0 then level = 0 elseif level > full then level = full end
    end
    local nl = level + n * per
    if n > a then
      s, rem, retry, reset = -1, floor((full - level) / per), -1, ceil(level / rate)
    elseif nl > full then
      s, rem, retry, reset = 0, floor((full - level) / per), ceil((nl - full) / rate), ceil(level / rate)
    else
      rem, reset = floor((full - nl) / per), ceil(nl / rate)
      local delay = tonumber(ARGV[o + 4])
      if delay >= 0 and n > 0 then
        local ex = nl - per - delay * per
        if ex > 0 then dl = ceil(ex / rate) end
      end
      set[f] = drain_encode(now, nl, rate)
      if reset > life then life = reset end
    end
    o = o + 5
  else
    local wid = floor(now / b)
    local c = 0
    if v then c = fixed_count(v, wid) end
    local left = (wid + 1) * b - now
    if c > 0 then reset = left end
    rem = a - c
    if n > a then
      s, retry = -1, -1
    elseif c + n > a then
      s, retry = 0, left
    else
      rem = a - c - n
      if c + n > 0 then reset = left end
      set[f] = fixed_encode(wid, c + n)
      if left > life then life = left end
    end
    o = o + 3
  end
  if s ~= 1 then reply[1] = 0 end
  local j = f * 5 - 3
  reply[j], reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4] = s, rem, retry, reset, dl
end
if reply[1] == 1 and n > 0 then
  redis.call('SET', KEYS[1], table.concat(set, ' '), 'PX', ceil(life / 1000))
end
return reply
