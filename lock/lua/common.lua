-- common.lua: helpers shared by the lock scripts; the Go side puts this file
-- before every script of the package (see script in redis.go), so a script
-- calls them as its own locals. Times are µs, exact in Lua's doubles (below
-- 2^53) and passed to Redis through '%d'. No helper reads ARGV; the KEYS a
-- helper touches are its arguments, named after the layouts in the headers
-- of acquire.lua (mutex), rw_acquire.lua (RWMutex) and sem_acquire.lua
-- (Semaphore).

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

-- Tombstones. A caller that gives up on an acquire without an answer buries
-- its call id (the *_cancel.lua scripts); the acquire refuses a buried call
-- whenever it lands, so a resend that arrives after the cancel takes nothing.

-- buried: whether the tombstone key exists. Reads key only.
local function buried(key)
  return redis.call('EXISTS', key) == 1
end

-- bury: set the tombstone key for ttl µs (the lease the call asked for: no
-- resend of it outlives that). Writes key only.
local function bury(key, ttl)
  redis.call('SET', key, '1', 'PX', math.ceil(tonumber(ttl) / 1000))
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

-- mint: the next fencing token, written to fence (no TTL). Tokens follow the
-- server clock when they can: after Redis lost the fence, the new token (now)
-- is still above every token handed out before, as long as fewer than one
-- holding per µs was started on average.
local function mint(fence, now)
  local token = tonumber(redis.call('GET', fence) or '0') + 1
  if token < now then token = now end
  redis.call('SET', fence, int(token))
  return token
end

-- mutexToken: the next fencing token of the mutex whose lock hash is key,
-- as mint: from the hash's fence field, whose value is f. When f is nil (a
-- new name, or the first acquisition since the 0.9 layout, which kept the
-- fence in a key of its own and gave the hash a TTL) the old fence key is
-- read, continued above and deleted, and the hash's TTL dropped. The caller
-- writes the token to f.
local function mutexToken(key, oldFence, f, now)
  if not f then
    f = redis.call('GET', oldFence)
    if f then redis.call('DEL', oldFence) end
    redis.call('PERSIST', key)
  end
  local token = tonumber(f or '0') + 1
  if token < now then token = now end
  return token
end

-- Holdings of one owner in a hash (the mutex's lock hash, the RWMutex's
-- writer hash): fields o owner, c hold count, t token, d deadline µs, k call
-- log (with Owner), r the call that last ended a holding (and, in the
-- mutex's hash, f the fence). A holding is live while d is after now: o,
-- c, t of an ended one may stay.

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

-- extend: move the deadline of owner's live holding in key to now + ttl µs,
-- and the key's TTL with it when expire (the RWMutex's writer hash; the
-- mutex's hash has none). Returns 1, or -1 (and writes nothing) when owner
-- does not hold key.
local function extend(key, owner, ttl, now, expire)
  local h = redis.call('HMGET', key, 'o', 'd')
  if not h[1] or h[1] ~= owner or tonumber(h[2]) <= now then return -1 end
  redis.call('HSET', key, 'd', int(now + ttl))
  if expire then redis.call('PEXPIRE', key, math.ceil(ttl / 1000)) end
  return 1
end

-- release: owner drops one level of its holding in key, once per call id.
-- Returns reply, ended: reply is -1 when owner does not hold key, else the
-- hold count left (a resend gets the first run's answer: from the log, or 0
-- when r names the call); ended is true only when this run ended the holding
-- (d set to 0, which no now passes, and r to call, in one HSET; o, c, t
-- stay, dead): the caller then wakes the next waiter. Third, the fields read
-- first: HMGET(key, 'o', 'c', 'd', 'k', 'r', 'q', 'f') (q and f: the
-- mutex's queue flag and fence, see acquire.lua).
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

-- Shared holdings (the RWMutex's readers, the Semaphore's permits): holders
-- is a zset of owner scored by lease deadline µs, holds a hash of 'c'..owner
-- hold count, 't'..owner token, 'k'..owner call log (with Owner) and 'r' the
-- call that last ended a holding. An owner holds while its score is after now.

-- sharedForget: drop holders whose lease ended, at most 100 per call, with
-- their fields in holds. Nothing relies on it: live holders are those whose
-- deadline is after now.
local function sharedForget(holders, holds, now)
  local gone = redis.call('ZRANGEBYSCORE', holders, '-inf', int(now), 'LIMIT', 0, 100)
  for _, o in ipairs(gone) do
    redis.call('ZREM', holders, o)
    redis.call('HDEL', holds, 'c' .. o, 't' .. o, 'k' .. o)
  end
end

-- sharedHeld: whether owner holds a live lease in holders. Reads holders.
local function sharedHeld(holders, owner, now)
  return tonumber(redis.call('ZSCORE', holders, owner) or '0') > now
end

-- sharedReenter: as reenter, for owner's live shared holding. Returns the
-- token.
local function sharedReenter(holds, owner, call, reentrant)
  local r = redis.call('HMGET', holds, 't' .. owner, 'k' .. owner)
  local token = tonumber(r[1] or '0')
  if not reentrant or logged(r[2], call) == token then return token end
  redis.call('HINCRBY', holds, 'c' .. owner, 1)
  redis.call('HSET', holds, 'k' .. owner, record(r[2], call, token))
  return token
end

-- sharedTake: start owner's holding with token, one level, until now + ttl
-- µs; the log (with Owner) starts with call. Both keys live at least ttl.
local function sharedTake(holders, holds, owner, token, call, reentrant, now, ttl)
  local ms = math.ceil(ttl / 1000)
  redis.call('ZADD', holders, int(now + ttl), owner)
  redis.call('HSET', holds, 'c' .. owner, 1, 't' .. owner, int(token))
  if reentrant then redis.call('HSET', holds, 'k' .. owner, record(nil, call, token)) end
  keep(holders, ms)
  keep(holds, ms)
end

-- sharedExtend: as extend, for owner's shared holding; both keys live at
-- least ttl.
local function sharedExtend(holders, holds, owner, ttl, now)
  if not sharedHeld(holders, owner, now) then return -1 end
  redis.call('ZADD', holders, int(now + ttl), owner)
  local ms = math.ceil(ttl / 1000)
  keep(holders, ms)
  keep(holds, ms)
  return 1
end

-- sharedRelease: as release, for owner's shared holding; when it ends,
-- owner leaves holders, its fields leave holds and holds 'r' is set to call.
local function sharedRelease(holders, holds, owner, call, now)
  local r = redis.call('HMGET', holds, 'k' .. owner, 'r')
  if r[2] == call then return 0, false end
  local done = logged(r[1], call)
  if done then return done, false end
  if not sharedHeld(holders, owner, now) then return -1, false end
  local c = redis.call('HINCRBY', holds, 'c' .. owner, -1)
  if c > 0 then
    redis.call('HSET', holds, 'k' .. owner, record(r[1], call, c))
    return c, false
  end
  redis.call('ZREM', holders, owner)
  redis.call('HDEL', holds, 'c' .. owner, 't' .. owner, 'k' .. owner)
  redis.call('HSET', holds, 'r', call)
  return 0, true
end

-- sharedCancel: as cancel, for owner's shared holding; when it ends, owner
-- leaves holders and its fields leave holds. Returns left only.
local function sharedCancel(holders, holds, owner, call, reentrant, now)
  if not sharedHeld(holders, owner, now) then return -1 end
  local r = redis.call('HMGET', holds, 'c' .. owner, 't' .. owner, 'k' .. owner)
  if logged(r[3], '~' .. call) or (reentrant and logged(r[3], call) ~= tonumber(r[2])) then
    return -1
  end
  local c = tonumber(r[1] or '1')
  if reentrant and c > 1 then
    redis.call('HSET', holds, 'c' .. owner, c - 1, 'k' .. owner, record(r[3], '~' .. call, c - 1))
    return c - 1
  end
  redis.call('ZREM', holders, owner)
  redis.call('HDEL', holds, 'c' .. owner, 't' .. owner, 'k' .. owner)
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

-- mutexQueued: whether a mutex's waiter queue q exists, judged first by
-- the lock hash's flag q (fields h from release): acquire.lua sets it when
-- it queues a waiter, so a lock nobody queued for costs no lookup; a flag
-- whose queue is gone is cleared.
local function mutexQueued(key, h, q)
  if not h[6] then return false end
  if redis.call('EXISTS', q) == 1 then return true end
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
-- from the head of waiters first, as firstLive.
local function semWake(holders, waiters, deadlines, permits, channel, now)
  -- A waiter queues after it has subscribed and before it waits: with
  -- nobody queued, nobody waits for a message.
  if redis.call('EXISTS', waiters) == 0 then return end
  local free = permits - redis.call('ZCOUNT', holders, '(' .. int(now), '+inf')
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
-- rw_release.lua): nobody while writer is held; else 'r'..p (or 'r') the
-- readers queued before the first waiting writer, or 'w'..p that writer when
-- no reader but it holds. Keys as rw_acquire.lua: writer KEYS[1], readers
-- KEYS[3], rq KEYS[5], wq KEYS[6], deadlines KEYS[7].
local function rwWake(writer, readers, rq, wq, deadlines, channel, now)
  -- As semWake: with nobody queued, nobody waits for a message.
  if redis.call('EXISTS', rq, wq) == 0 then return end
  local w = redis.call('HMGET', writer, 'o', 'd')
  if w[1] and tonumber(w[2]) > now then return end
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
    local live = redis.call('ZRANGEBYSCORE', readers, '(' .. int(now), '+inf', 'LIMIT', 0, 2)
    if #live == 0 or (#live == 1 and live[1] == fwo) then
      redis.call('PUBLISH', channel, 'w' .. int(fw))
    end
  end
end
