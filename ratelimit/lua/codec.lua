-- codec.lua: how drain and fixed-window rules store their values, shared by
-- every rate limit script (New puts it in front of each). Mirrored by
-- state_memory.go. Each form has an integer encoding that Redis keeps as a
-- 16-byte integer rather than a string of 32 or 48 bytes, and a text form for
-- what does not fit it.
local EPOCH = 1577836800 -- 2020-01-01T00:00:00Z: integer drain states count seconds from it

-- A drain rule's value is the level L (requests × per µs) at time t (µs).
-- The integer forms hold t as a whole second s; drain_encode moves t back to
-- it, adding what the bucket drains meanwhile to L, which describes the same
-- level at every later time. Three forms; drain_decode(v, now) returns t, L:
--   long:  when 0 <= s - EPOCH < 9·10^8 and L < 10^10: the digits of
--          s - EPOCH followed by L in 10 digits.
--   short: when L < 10^14 and the key lives less than SHORT_LIFE:
--          -(m·10^14 + L) with 1 <= m <= SHORT_PERIOD, m = s mod
--          SHORT_PERIOD (SHORT_PERIOD for 0, so that the digits never start
--          with 0, which Redis would keep as text), so |v| < 9.22·10^18, a
--          64-bit integer. A reader at now finds s as the second d =
--          (now_s - m) mod SHORT_PERIOD before now_s; d >= SHORT_BACK means
--          the clock stepped back (d - SHORT_PERIOD, up to 4 hours). This is
--          exact while the value is read less than SHORT_BACK seconds after it
--          was written, which the key's life (under 20 hours) guarantees:
--          Redis expires it first.
--   text:  "t:L", for everything else.
--   debt:  "t:-L", a level past full (L > the capacity's level) that a
--          charge (limits.lua's mode "f") left: drain_decode returns -L, and
--          its readers take the level as L, drained but not capped at full
--          (a level above full of any other form is capped: the capacity
--          was lowered). Written by drain_debt, at now exactly.
-- With an injected clock (ARGV[1] is now) Redis still expires keys on its own
-- time, so a fake clock moved a day ahead could read a short value written a
-- day "ago" as recent: then the value that would be short is written as text
-- ("s·10^6:L", the same state), and the short form is used only on TIME.
-- The formats are built from their parts with string.format and parsed by
-- substrings: Lua numbers are doubles, exact only below 2^53. (The arithmetic
-- is in µs, with % rather than math.floor: the short form's decoding costs
-- Redis no more than the text form's.)
local SHORT_PERIOD, SHORT_BACK, SHORT_LIFE = 90000, 75600, 72000000000
local SHORT_PERIOD_US, SHORT_BACK_US = SHORT_PERIOD * 1000000, SHORT_BACK * 1000000
local SHORT_OK = ARGV[1] == ''
local function drain_decode(v, now)
  if string.byte(v, 1) == 45 then -- '-': the short form
    local ns = now - now % 1000000
    local d = (ns - tonumber(string.sub(v, 2, -15)) * 1000000) % SHORT_PERIOD_US
    if d >= SHORT_BACK_US then d = d - SHORT_PERIOD_US end
    return ns - d, tonumber(string.sub(v, -14))
  end
  local c = string.find(v, ':', 1, true)
  if c then return tonumber(string.sub(v, 1, c - 1)), tonumber(string.sub(v, c + 1)) end
  return (tonumber(string.sub(v, 1, -11)) + EPOCH) * 1000000, tonumber(string.sub(v, -10))
end

-- drain_encode returns the value of level nl at now, stored in a key that
-- lives life µs (0 for a value that is not stored; math.huge when the
-- key's life is not known, which rules out the short form).
local function drain_encode(now, nl, rate, life)
  local sub = now % 1000000
  local sec = (now - sub) / 1000000
  local l = nl + sub * rate
  local s = sec - EPOCH
  if l < 10000000000 and s >= 0 and s < 900000000 then return string.format('%d%010d', s, l) end
  if l < 100000000000000 and life < SHORT_LIFE then
    if not SHORT_OK then return string.format('%d:%d', sec * 1000000, l) end
    return string.format('-%d%014d', (sec - 1) % SHORT_PERIOD + 1, l)
  end
  return string.format('%d:%d', now, nl)
end

-- A FixedWindow's value is the count c of window w. Integer form, when
-- c < 9·10^9: c·10^6 + (w mod 10^6). Text form: "w:c". A count is read only
-- for its own window (in the integer form, unless the key outlived 10^6
-- windows, which its TTL of one window prevents).
local function fixed_count(v, wid)
  local p = string.find(v, ':', 1, true)
  if p then
    if tonumber(string.sub(v, 1, p - 1)) == wid then return tonumber(string.sub(v, p + 1)) end
    return 0
  end
  local x = tonumber(v)
  local c = math.floor(x / 1000000)
  if x - c * 1000000 == wid % 1000000 then return c end
  return 0
end

local function fixed_encode(wid, c)
  if c < 9000000000 then return string.format('%d', c * 1000000 + wid % 1000000) end
  return string.format('%d:%d', wid, c)
end

-- drain_debt returns the value of a level nl past full at now (the debt form).
local function drain_debt(now, nl)
  return string.format('%d:-%d', now, nl)
end
