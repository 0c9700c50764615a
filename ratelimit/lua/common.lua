-- common.lua: helpers shared by the rate limit scripts. Integers are Lua
-- doubles: every value stays below 2^53, which New checks for rule parameters.

-- fdiv: floor(a / b) for integers a >= 0, b > 0, corrected for double rounding.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 elseif r >= b then return q + 1 end
  return q
end

-- cdiv: ceil(a / b) for integers a >= 0, b > 0.
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then return q + 1 end
  return q
end

-- istr formats an integer without an exponent.
local function istr(x) return string.format('%d', x) end

-- pttl converts a lifetime in microseconds to whole milliseconds, at least 1.
local function pttl(us)
  local ms = cdiv(us, 1000)
  if ms < 1 then return 1 end
  return ms
end
