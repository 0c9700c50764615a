-- codec.lua: how drain and fixed-window rules store their values, shared by
-- every rate limit script (New puts it in front of each). Mirrored by
-- state_memory.go. Each form has an integer encoding that Redis keeps as a
-- 16-byte integer rather than a string of 32 or 48 bytes, and a text form for
-- what does not fit it.
local EPOCH = 1577836800 -- 2020-01-01T00:00:00Z: integer drain states count seconds from it

-- A drain rule's value is the level L (requests × per µs) at time t (µs).
-- Integer form, when t is a whole second s seconds after EPOCH
-- (0 <= s < 9·10^8) and L < 10^10: the digits of s followed by L in 10
-- digits. Text form: "t:L". drain_decode returns t, L.
local function drain_decode(v)
  local c = string.find(v, ':', 1, true)
  if c then return tonumber(string.sub(v, 1, c - 1)), tonumber(string.sub(v, c + 1)) end
  return (tonumber(string.sub(v, 1, -11)) + EPOCH) * 1000000, tonumber(string.sub(v, -10))
end

-- drain_encode returns the value of level nl at now. The integer form moves
-- t back to the whole second and adds what the bucket drains meanwhile to L,
-- which describes the same level at every later time.
local function drain_encode(now, nl, rate)
  local sec = math.floor(now / 1000000)
  local l = nl + (now - sec * 1000000) * rate
  local s = sec - EPOCH
  if l < 10000000000 and s >= 0 and s < 900000000 then return string.format('%d%010d', s, l) end
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
