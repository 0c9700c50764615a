-- allow_all.lua: AllowAll. Decide several requests, each n units against the
-- rules of its Limiter, atomically: only when every rule of every request
-- admits are they consumed. It runs after common.lua and the algorithm files
-- of the kinds the requests use.
-- KEYS: the state key of every rule of every request, in order (every
-- SlidingLog rule of a request names the same log key).
-- ARGV[1] now in µs, or "" to use TIME; ARGV[2] mode ("0" decide and commit
-- when all admit, "c" check: commit nothing and reply as for a denial);
-- then per request: n, its number of rules R, and R × 5 rule arguments as in
-- allow.lua (kind and 4 parameters).
-- Requests that name the same state key (the same user key and rule) are
-- checked against it with the sum of their n, and it is committed once.
-- reply: {allowed (1/0: every request admitted), then per rule of every
-- request, in order: status, remaining, retry_us, reset_us, delay_us}. When
-- not allowed, and always in mode "c", the rules of a request that no rule
-- denies report a peek (n = 0): nothing was consumed.
-- Needs Redis >= 5 (effects replication, so that TIME may precede writes).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local check_only = ARGV[2] == 'c'

-- P[5(k - 1) + 1 ...]: rule k's kind and parameters; Q[k]: its request;
-- first[q] .. last[q]: request q's rules; N[key]: the units of every request
-- that names key.
local P, Q, first, last, N = {}, {}, {}, {}, {}
local k, q, i = 0, 0, 3
while i <= #ARGV do
  local n, r = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  q = q + 1
  first[q] = k + 1
  local seen = {}
  for _ = 1, r do
    k = k + 1
    local o = (k - 1) * 5
    P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5] =
      tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
    i = i + 5
    Q[k] = q
    local key = KEYS[k]
    if not seen[key] then
      seen[key] = true
      N[key] = (N[key] or 0) + n
    end
  end
  last[q] = k
end
if k ~= #KEYS then
  return redis.error_reply('ERR allow_all: ' .. #KEYS .. ' keys for ' .. k .. ' rules')
end

local newest = {} -- per log key: its newest entry's time, or false
local function check(k, n)
  local o = (k - 1) * 5
  local kind, a, b, c, d = P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5]
  local key = KEYS[k]
  if kind == 4 then
    return drain_check(key, a, b, c, d, now, n)
  elseif kind == 1 then
    return fixed_check(key, a, b, now, n)
  elseif kind == 2 then
    return sliding_check(key, a, b, c, now, n)
  end
  local nw = newest[key]
  if nw == nil then
    nw = log_newest(key) or false
    newest[key] = nw
  end
  return log_check(key, a, b, now, n, nw)
end

local reply = {1}
local X = {}      -- per state key: what its check computed for the commit
local denied = {} -- per request: true when one of its rules denies it
for k = 1, #KEYS do
  local key = KEYS[k]
  local s, rem, retry, reset, dl, x = check(k, N[key])
  if s ~= 1 then
    reply[1] = 0
    denied[Q[k]] = true
  elseif X[key] == nil then
    X[key] = x
  end
  local j = 1 + (k - 1) * 5
  reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = s, rem, retry, reset, dl
end

if reply[1] == 0 or check_only then
  for r = 1, q do
    if not denied[r] then
      for k = first[r], last[r] do
        local s, rem, retry, reset, dl = check(k, 0)
        local j = 1 + (k - 1) * 5
        reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5] = s, rem, retry, reset, dl
      end
    end
  end
  return reply
end

local done = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local n = N[key]
  if n > 0 and not done[key] then
    done[key] = true
    local o = (k - 1) * 5
    local kind = P[o + 1]
    if kind == 4 then
      drain_commit(key, P[o + 4], now, X[key])
    elseif kind == 1 then
      fixed_commit(key, P[o + 3], now, X[key])
    elseif kind == 2 then
      sliding_commit(key, P[o + 3], P[o + 4], now, n, X[key])
    else
      log_commit(key, P[o + 4], now, n, newest[key])
    end
  end
end
return reply
