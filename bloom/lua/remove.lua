-- remove.lua: remove a batch of items from a counting Bloom filter, one item
-- after the other.
-- KEYS[1..s] the filter's shard keys (strings of 4-bit counters) the batch touches.
-- ARGV[1] k, the counters per item; then, for every counter of every item,
--         item after item, two arguments: its key's index in KEYS (1..s) and
--         its bit offset.
-- Per item: read its k counters. If one is zero the item is not in the filter
-- and is skipped. Otherwise decrement every counter whose value read is below
-- 15 (a saturated counter has lost its count and stays), with OVERFLOW SAT so
-- that none goes below zero.
-- reply: the number of items removed.
-- Needs Redis >= 6.2 (BITFIELD_RO).
local k = tonumber(ARGV[1])
local n = (#ARGV - 1) / (2 * k)
local removed = 0
local a = 2
for _ = 1, n do
  -- Group the item's counters by key: one BITFIELD_RO per key to read them.
  local groups, order, off = {}, {}, {}
  for j = 1, k do
    local key = tonumber(ARGV[a])
    off[j] = ARGV[a + 1]
    a = a + 2
    local g = groups[key]
    if not g then
      g = { args = {}, slots = {} }
      groups[key] = g
      order[#order + 1] = key
    end
    local ga = g.args
    ga[#ga + 1] = 'GET'; ga[#ga + 1] = 'u4'; ga[#ga + 1] = off[j]
    g.slots[#g.slots + 1] = j
  end
  local v, present = {}, true
  for _, key in ipairs(order) do
    local g = groups[key]
    local r = redis.call('BITFIELD_RO', KEYS[key], unpack(g.args))
    for x, j in ipairs(g.slots) do
      v[j] = r[x]
      if r[x] == 0 then present = false end
    end
    if not present then break end
  end
  if present then
    for _, key in ipairs(order) do
      local args = { 'OVERFLOW', 'SAT' }
      for _, j in ipairs(groups[key].slots) do
        if v[j] < 15 then
          args[#args + 1] = 'INCRBY'; args[#args + 1] = 'u4'; args[#args + 1] = off[j]; args[#args + 1] = '-1'
        end
      end
      if #args > 2 then redis.call('BITFIELD', KEYS[key], unpack(args)) end
    end
    removed = removed + 1
  end
end
return removed
