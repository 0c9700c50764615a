-- reset.lua: delete a counter (a Window counter: the current window's).
-- KEYS[1] the counter, as in add.lua
-- ARGV[1] now µs or "" for TIME; ARGV[2] mode "p", "t" or "w"; for "w":
--   ARGV[3] window µs, ARGV[4] offset µs in [0, window)
-- reply: 1
local key = KEYS[1]
if ARGV[2] == 'w' then
  local now = ARGV[1]
  if now == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(now)
  end
  local window, offset = tonumber(ARGV[3]), tonumber(ARGV[4])
  local a = now - offset
  local wid = math.floor(a / window)
  local r = a - wid * window
  if r < 0 then wid = wid - 1 elseif r >= window then wid = wid + 1 end
  key = key .. ':' .. string.format('%d', wid)
end
redis.call('DEL', key)
return 1
