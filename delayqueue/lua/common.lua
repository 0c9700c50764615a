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
-- of those due times (µs). It wakes a consumer when a job is due before what
-- the consumers plan to look at:
--   - While a consumer is the waker (waker, a string "<plan_us>:<until_us>:<runner>"
--     that lives while until_us > now, see take.lua), the others sleep; a job
--     due before its plan is published on its own channel, "<channel>:<runner>",
--     and the plan moves to the job's due time.
--   - Without a live waker, a job due before every other scheduled job is
--     published on channel, which every consumer hears.
-- Reads the head of sched and waker; writes sched, waker, and publishes.
local function schedule(sched, waker, channel, zadd, first, now)
  local plan, untl, owner = string.match(redis.call('GET', waker) or '', '^(%d+):(%d+):(.*)$')
  local sfirst = string.format('%d', first)
  if plan and tonumber(untl) > now then
    redis.call('ZADD', sched, unpack(zadd))
    if first < tonumber(plan) then
      local grace = tonumber(untl) - tonumber(plan)
      redis.call('SET', waker, string.format('%d:%d:', first, first + grace) .. owner, 'KEEPTTL')
      redis.call('PUBLISH', channel .. ':' .. owner, sfirst)
    end
    return
  end
  local head = redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')
  redis.call('ZADD', sched, unpack(zadd))
  if not head[2] or first < tonumber(head[2]) then redis.call('PUBLISH', channel, sfirst) end
end
