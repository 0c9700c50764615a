-- common.lua: helpers shared by the delay queue scripts; redis.go prepends it
-- to every script, which calls them. It defines functions only.
-- Times are µs since the epoch, below 2^53 (exact in Lua's doubles).

-- clock returns now in µs: arg (a script's ARGV[1]) when it is not "", for an
-- injected test clock, else the Redis clock. Reads TIME; writes nothing.
local function clock(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(arg)
end

-- receipt returns what an earlier run of this call recorded in its receipt
-- (see take.lua), while it lasts by now, else nil. Reads key (string
-- "<deadline_us>:<what>"); writes nothing.
local function receipt(key, now)
  local dl, body = string.match(redis.call('GET', key) or '', '^(%d+):(.*)$')
  if dl and tonumber(dl) > now then return body end
  return nil
end

-- setReceipt records body as this call's receipt for lifetime µs (a string,
-- as the script's ARGV carries it) from now. Reads nothing; writes key, with a
-- TTL that only collects it: lifetime rounded up to ms, plus 1 s.
local function setReceipt(key, now, lifetime, body)
  local w = tonumber(lifetime)
  redis.call('SET', key, string.format('%d:', now + w) .. body, 'PX', math.ceil(w / 1000) + 1000)
end

-- schedule adds jobs to the scheduled set sched: zadd is ZADD's arguments,
-- "<due_us>", id, ... (due times formatted with %d), and first the earliest
-- of those due times (µs). When first is before every job scheduled so far
-- (consumers plan to look at the head of sched at the latest), it is
-- published: on the waker's own channel, "<channel>:<runner>", while there is
-- a waker (waker: "<until_us>:<runner>", live while until_us > now, see
-- take.lua), the other consumers sleeping; else on channel, which every
-- consumer hears.
-- Reads the head of sched and waker; writes sched, and publishes.
local function schedule(sched, waker, channel, zadd, first, now)
  local head = redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')
  redis.call('ZADD', sched, unpack(zadd))
  if head[2] and first >= tonumber(head[2]) then return end
  local untl, owner = string.match(redis.call('GET', waker) or '', '^(%d+):(.*)$')
  if untl and tonumber(untl) > now then channel = channel .. ':' .. owner end
  redis.call('PUBLISH', channel, string.format('%d', first))
end
