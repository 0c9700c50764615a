-- common.lua: helpers shared by the lock scripts; the Go side puts this file
-- before every script of the package (see script in redis.go), so a script
-- calls them as its own locals. Times are µs, exact in Lua's doubles (below
-- 2^53) and passed to Redis through '%d'. No helper reads ARGV; the KEYS a
-- helper touches are its arguments, named after the layouts in the headers
-- of acquire.lua (mutex), rw_acquire.lua (RWMutex) and sem_acquire.lua
-- (Semaphore). Each lock keeps its state in one hash per name (the lock
-- hash, without a TTL: it carries the fence), and its waiter queue in keys of
-- their own that exist only while someone waits.

-- clock: the time in µs, arg when it is not "" (a test clock) else Redis
-- TIME. Reads nothing else, writes nothing.
local function clock(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(arg)
end

-- int formats an integer without an exponent.
local function int(x) return string.format('%d', x) end

-- keep: make key live at least ms milliseconds; a missing key stays missing
-- and a longer TTL stays (TTLs here only collect garbage).
local function keep(key, ms)
  local pt = redis.call('PTTL', key)
  if pt ~= -2 and pt < ms then redis.call('PEXPIRE', key, ms) end
end

-- Call logs. A holding taken with Owner keeps a log (";id=value" entries,
-- the last 8 calls that changed it): an acquire records the token it got, a
-- release the hold count it left, a cancel ('~'..id) what it left. A resend
-- of a logged call finds its answer there and changes nothing again.

-- logged: the value log records for call id, or nil. Pure.
local function logged(log, id)
  if not log then return nil end
  local _, e = string.find(log, ';' .. id .. '=', 1, true)
  if not e then return nil end
  return tonumber(string.match(log, '^-?%d+', e + 1))
end

-- record: log (nil counts as empty) with ";id=v" appended, keeping the last
-- 8 entries. Pure.
local function record(log, id, v)
  log = (log or '') .. ';' .. id .. '=' .. int(v)
  local _, n = string.gsub(log, ';', '')
  if n > 8 then log = string.sub(log, (string.find(log, ';', 2, true))) end
  return log
end

-- nextToken: the next fencing token of the lock whose hash is key (mutex,
-- RWMutex, Semaphore), from the hash's fence field, whose value is f.
-- Tokens follow the server clock when they can: after Redis lost the hash,
-- the new token (now) is still above every token handed out before, as long
-- as fewer than one holding per µs was started on average. When f is nil (a
-- new name, or the first acquisition since the 0.9 layout, which kept the
-- fence in a key of its own, oldFence, and gave the mutex's hash a TTL) the
-- old fence is read, continued above and deleted, and the hash's TTL dropped.
-- The caller writes the token to f.
local function nextToken(key, oldFence, f, now)
  if not f then
    f = redis.call('GET', oldFence)
    if f then redis.call('DEL', oldFence) end
    redis.call('PERSIST', key)
  end
  local token = tonumber(f or '0') + 1
  if token < now then token = now end
  return token
end

-- Holdings of one owner in a lock hash (the mutex's, the RWMutex's writer):
-- fields o owner, c hold count, t token, d deadline µs, k call log (with
-- Owner), r the call that last ended a holding. A holding is live while d
-- is after now: o, c, t of an ended one may stay. Other fields of the hash:
-- f the fence (the last token handed out, see nextToken), q the queue flag
-- (see queued), 'x'..call the tombstones (see bury) and, in the RWMutex's
-- and the Semaphore's, the shared holdings (see sweep).

-- reenter: owner, holding key live with fields h = HMGET(key, 'o', 'c', 't',
-- 'd', 'k'), asks again with call. A resend of the call that got the holding
-- or a level (without Owner: any; with Owner: logged with this token) adds
-- nothing; otherwise one level is added and logged. Returns the token.
local function reenter(key, h, call, reentrant)
  local token = tonumber(h[3])
  if not reentrant or logged(h[5], call) == token then return token end
  redis.call('HINCRBY', key, 'c', 1)
  redis.call('HSET', key, 'k', record(h[5], call, token))
  return token
end

-- extend: move the deadline of owner's live holding in key to now + ttl µs.
-- Returns 1, or -1 (and writes nothing) when owner does not hold key.
local function extend(key, owner, ttl, now)
  local h = redis.call('HMGET', key, 'o', 'd')
  if not h[1] or h[1] ~= owner or tonumber(h[2]) <= now then return -1 end
  redis.call('HSET', key, 'd', int(now + ttl))
  return 1
end

-- release: owner drops one level of its holding in key, once per call id.
-- Returns reply, ended: reply is -1 when owner does not hold key, else the
-- hold count left (a resend gets the first run's answer: from the log, or 0
-- when r names the call); ended is true only when this run ended the holding
-- (d set to 0, which no now passes, and r to call, in one HSET; o, c, t
-- stay, dead): the caller then wakes the next waiter. Third, the fields read
-- first: HMGET(key, 'o', 'c', 'd', 'k', 'r', 'q', 'f') (q the queue flag,
-- f the fence).
local function release(key, owner, call, now)
  local h = redis.call('HMGET', key, 'o', 'c', 'd', 'k', 'r', 'q', 'f')
  if h[5] == call then return 0, false, h end
  local done = logged(h[4], call)
  if done then return done, false, h end
  if not h[1] or h[1] ~= owner or tonumber(h[3]) <= now then return -1, false, h end
  local c = tonumber(h[2])
  if c > 1 then
    redis.call('HSET', key, 'c', c - 1, 'k', record(h[4], call, c - 1))
    return c - 1, false, h
  end
  redis.call('HSET', key, 'd', 0, 'r', call)
  return 0, true, h
end

-- cancel: give back the level the abandoned acquire call got of owner's
-- holding in key, at most once (the log then names '~'..call). Returns left,
-- h: left is -1 when the call holds nothing (owner's holding is not live, or
-- not the call's, or already given back), else the hold count left (0: the
-- holding ended, o, c, t, d deleted); h the fields as HMGET(key, 'o', 'c',
-- 't', 'd', 'k') read before any change.
local function cancel(key, owner, call, reentrant, now)
  local h = redis.call('HMGET', key, 'o', 'c', 't', 'd', 'k')
  if not (h[1] == owner and tonumber(h[4]) > now) or logged(h[5], '~' .. call) or
    (reentrant and logged(h[5], call) ~= tonumber(h[3])) then
    return -1, h
  end
  local c = tonumber(h[2])
  if reentrant and c > 1 then
    redis.call('HSET', key, 'c', c - 1, 'k', record(h[5], '~' .. call, c - 1))
    return c - 1, h
  end
  redis.call('HDEL', key, 'o', 'c', 't', 'd')
  if reentrant then redis.call('HSET', key, 'k', record(h[5], '~' .. call, 0)) end
  return 0, h
end

-- Tombstones. A caller that gives up on an acquire without an answer buries
-- its call id (the cancel scripts); the acquire refuses a buried call
-- whenever it lands, so a resend that arrives after the cancel takes nothing.
-- A tombstone is field 'x'..call of the lock hash, holding the time µs when
-- it may go (the acquire reads it in the HMGET it makes anyway).

-- Shared holdings (the RWMutex's readers, the Semaphore's permits), fields of
-- the lock hash, per owner: 'h'..owner lease deadline µs, 't'..owner token,
-- 'c'..owner hold count (absent: 1), 'l'..owner call log (with Owner); and
-- n the number of 'h' fields, m at most the smallest deadline among them (so
-- while m is after now every holding n counts is live and none has to be
-- looked at), u the call that last ended a holding. An owner holds while
-- its deadline is after now; sweep drops the holdings that ended, when m says
-- there may be some. (Separate fields, not one "d c t" value: Lua's
-- string.match costs more than the HMGET of three fields.)

-- sweep: drop from the lock hash key what has ended by now: tombstones past
-- their time, and shared holdings past their deadline with their other
-- fields; in a hash with shared holdings (field n), n and m are set anew.
-- Reads the whole hash (live holders, tombstones, logs): only cancels, and
-- attempts that find m passed, call it. Returns n, m (0 when n is 0).
local function sweep(key, now)
  local all = redis.call('HGETALL', key)
  local n, m, counted, gone = 0, 0, false, {}
  for i = 1, #all, 2 do
    local f = all[i]
    local p = string.sub(f, 1, 1)
    if f == 'n' then
      counted = true
    elseif p == 'x' and #f > 1 then
      if tonumber(all[i + 1]) <= now then gone[#gone + 1] = f end
    elseif p == 'h' and #f > 1 then
      local d = tonumber(all[i + 1])
      if d <= now then
        local o = string.sub(f, 2)
        gone[#gone + 1] = f
        gone[#gone + 1] = 't' .. o
        gone[#gone + 1] = 'c' .. o
        gone[#gone + 1] = 'l' .. o
      else
        n = n + 1
        if m == 0 or d < m then m = d end
      end
    end
  end
  -- HDEL in batches: unpack is bounded by Lua's stack.
  for i = 1, #gone, 500 do
    redis.call('HDEL', key, unpack(gone, i, math.min(i + 499, #gone)))
  end
  if counted then redis.call('HSET', key, 'n', n, 'm', int(m)) end
  return n, m
end

-- bury: leave call's tombstone in the lock hash key until now + ttl µs (the
-- lease the call asked for: no resend of it outlives that), after a sweep
-- (cancels are rare; tombstones need no other collection).
local function bury(key, call, ttl, now)
  sweep(key, now)
  redis.call('HSET', key, 'x' .. call, int(now + tonumber(ttl)))
end

-- sharedState: the shared holdings as an attempt reads them, from fields n,
-- m and owner's 'h' and 'l' (nil when absent): {n, m, d (owner's deadline,
-- nil when it holds nothing, not even an ended holding), log}. Pure.
local function sharedState(n, m, h, l)
  return {n = tonumber(n or '0'), m = tonumber(m or '0'), d = tonumber(h), log = l}
end

-- sharedLive: the number of live shared holdings of key, s as sharedState
-- read it: n itself while m is after now, else what a sweep leaves (s is
-- updated: n, m, and d gone when owner's holding had ended).
local function sharedLive(key, s, now)
  if s.n > 0 and s.m <= now then
    s.n, s.m = sweep(key, now)
    if s.d and s.d <= now then s.d = nil end
  end
  return s.n
end

-- sharedReenter: as reenter, for owner's live shared holding (s as
-- sharedState). Returns the token.
local function sharedReenter(key, owner, s, call, reentrant)
  local r = redis.call('HMGET', key, 't' .. owner, 'c' .. owner)
  local token = tonumber(r[1])
  if not reentrant or logged(s.log, call) == token then return token end
  redis.call('HSET', key, 'c' .. owner, tonumber(r[2] or '1') + 1, 'l' .. owner, record(s.log, call, token))
  return token
end

-- sharedTake: start owner's shared holding with token, one level, until now
-- + ttl µs, and write token to the fence, in one HSET; the log (with Owner)
-- starts with call. s as sharedState (an ended holding of owner's, still
-- counted, is replaced).
local function sharedTake(key, owner, s, token, call, reentrant, now, ttl)
  local d, tok = int(now + ttl), int(token)
  local n = s.n
  if not s.d then n = n + 1 end
  local args = {'h' .. owner, d, 't' .. owner, tok, 'f', tok, 'n', n}
  if s.n == 0 or now + ttl < s.m then
    args[#args + 1] = 'm'
    args[#args + 1] = d
  end
  if s.d then
    args[#args + 1] = 'c' .. owner
    args[#args + 1] = 1
  end
  if reentrant then
    args[#args + 1] = 'l' .. owner
    args[#args + 1] = record(nil, call, token)
  end
  redis.call('HSET', key, unpack(args))
end

-- sharedExtend: as extend, for owner's shared holding (m follows a deadline
-- moved below it).
local function sharedExtend(key, owner, ttl, now)
  local r = redis.call('HMGET', key, 'h' .. owner, 'm')
  if not r[1] or tonumber(r[1]) <= now then return -1 end
  local d = now + ttl
  if d < tonumber(r[2] or '0') then
    redis.call('HSET', key, 'h' .. owner, int(d), 'm', int(d))
  else
    redis.call('HSET', key, 'h' .. owner, int(d))
  end
  return 1
end

-- sharedRelease: as release, for owner's shared holding; when it ends, its
-- fields go, n counts one less and u names call. Third, the fields read
-- first: HMGET(key, 'h'..owner, 'c'..owner, 'l'..owner, 'u', 'n', 'q').
local function sharedRelease(key, owner, call, now)
  local r = redis.call('HMGET', key, 'h' .. owner, 'c' .. owner, 'l' .. owner, 'u', 'n', 'q')
  if r[4] == call then return 0, false, r end
  local done = logged(r[3], call)
  if done then return done, false, r end
  if not r[1] or tonumber(r[1]) <= now then return -1, false, r end
  local c = tonumber(r[2] or '1')
  if c > 1 then
    redis.call('HSET', key, 'c' .. owner, c - 1, 'l' .. owner, record(r[3], call, c - 1))
    return c - 1, false, r
  end
  redis.call('HDEL', key, 'h' .. owner, 't' .. owner, 'c' .. owner, 'l' .. owner)
  redis.call('HSET', key, 'n', tonumber(r[5]) - 1, 'u', call)
  return 0, true, r
end

-- sharedCancel: as cancel, for owner's shared holding; when it ends, its
-- fields go and n counts one less. Returns left only.
local function sharedCancel(key, owner, call, reentrant, now)
  local r = redis.call('HMGET', key, 'h' .. owner, 'c' .. owner, 't' .. owner, 'l' .. owner, 'n')
  if not r[1] or tonumber(r[1]) <= now then return -1 end
  if logged(r[4], '~' .. call) or (reentrant and logged(r[4], call) ~= tonumber(r[3])) then
    return -1
  end
  local c = tonumber(r[2] or '1')
  if reentrant and c > 1 then
    redis.call('HSET', key, 'c' .. owner, c - 1, 'l' .. owner, record(r[4], '~' .. call, c - 1))
    return c - 1
  end
  redis.call('HDEL', key, 'h' .. owner, 't' .. owner, 'c' .. owner, 'l' .. owner)
  redis.call('HSET', key, 'n', tonumber(r[5]) - 1)
  return 0
end

-- Waiter queues: a zset of owners (scored by arrival or place) and a hash of
-- waiter deadlines µs, prefix..owner -> µs; a waiter that stops retrying
-- drops out once its deadline passes.

-- unqueue: owner leaves queue q and its deadline leaves deadlines.
local function unqueue(q, deadlines, owner, prefix)
  redis.call('ZREM', q, owner)
  redis.call('HDEL', deadlines, prefix .. owner)
end

-- queued: whether any of the waiter queue keys exists, judged first by the
-- lock hash's flag q, whose value is flag: an attempt that queues a waiter
-- sets it, so a lock nobody queued for costs no lookup; a flag whose queues
-- are gone is cleared.
local function queued(key, flag, ...)
  if not flag then return false end
  if redis.call('EXISTS', ...) > 0 then return true end
  redis.call('HDEL', key, 'q')
  return false
end

-- firstLive: the longest live waiter of q (mutex and Semaphore queues,
-- prefix ''), dropping the dead ones before it, at most 100 per call; nil
-- when none of those is live.
local function firstLive(q, deadlines, now)
  local head = redis.call('ZRANGE', q, 0, 99)
  for _, w in ipairs(head) do
    if tonumber(redis.call('HGET', deadlines, w) or '0') > now then return w end
    redis.call('ZREM', q, w)
    redis.call('HDEL', deadlines, w)
  end
  return nil
end

-- semWake: wake the Semaphore waiters that free permits can admit (see
-- sem_release.lua): with f permits free, publish 's'..p on channel, p the
-- place of the f-th live waiter (or of the last waiter). Drops dead waiters
-- from the head of waiters first, as firstLive. Keys as sem_acquire.lua:
-- the lock hash key (flag: its q), waiters KEYS[3], deadlines KEYS[4].
local function semWake(key, flag, waiters, deadlines, permits, channel, now)
  -- A waiter queues after it has subscribed and before it waits: with
  -- nobody queued, nobody waits for a message.
  if not queued(key, flag, waiters) then return end
  local h = redis.call('HMGET', key, 'n', 'm')
  local free = permits - sharedLive(key, sharedState(h[1], h[2]), now)
  if free <= 0 then return end
  firstLive(waiters, deadlines, now)
  local last = redis.call('ZRANGE', waiters, free - 1, free - 1, 'WITHSCORES')
  if not last[2] then last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES') end
  if last[2] then redis.call('PUBLISH', channel, 's' .. int(tonumber(last[2]))) end
end

-- rwFirst: the place and owner of the longest live waiter of the RWMutex
-- queue q (side s: deadlines are s..owner), dropping dead ones from its
-- head, at most 100 per call; past those, the next one counts as live.
-- nil, nil when q is empty.
local function rwFirst(q, deadlines, s, now)
  local head = redis.call('ZRANGE', q, 0, 99, 'WITHSCORES')
  if #head == 0 then return nil, nil end
  for i = 1, #head, 2 do
    if tonumber(redis.call('HGET', deadlines, s .. head[i]) or '0') > now then
      return tonumber(head[i + 1]), head[i]
    end
    redis.call('ZREM', q, head[i])
    redis.call('HDEL', deadlines, s .. head[i])
  end
  local rest = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if rest[2] then return tonumber(rest[2]), rest[1] end
  return nil, nil
end

-- rwWake: publish on channel who of an RWMutex can go now, if anyone (see
-- rw_release.lua): nobody while the write side is held; else 'r'..p (or
-- 'r') the readers queued before the first waiting writer, or 'w'..p that
-- writer when no reader but it holds. Keys as rw_acquire.lua: the lock hash
-- key (flag: its q), rq KEYS[3], wq KEYS[4], deadlines KEYS[5].
local function rwWake(key, flag, rq, wq, deadlines, channel, now)
  -- As semWake: with nobody queued, nobody waits for a message.
  if not queued(key, flag, rq, wq) then return end
  local h = redis.call('HMGET', key, 'o', 'd', 'n', 'm')
  if h[1] and tonumber(h[2]) > now then return end
  local fw, fwo = rwFirst(wq, deadlines, 'w', now)
  local fr = rwFirst(rq, deadlines, 'r', now)
  if fr and (not fw or fr < fw) then
    if fw then
      redis.call('PUBLISH', channel, 'r' .. int(fw - 1))
    else
      redis.call('PUBLISH', channel, 'r')
    end
    return
  end
  if fw then
    local live = sharedLive(key, sharedState(h[3], h[4]), now)
    if live == 1 and tonumber(redis.call('HGET', key, 'h' .. fwo) or '0') > now then live = 0 end
    if live == 0 then redis.call('PUBLISH', channel, 'w' .. int(fw)) end
  end
end
