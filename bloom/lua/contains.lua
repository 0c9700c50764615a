-- contains.lua: test a batch of items against a Bloom filter, item after item;
-- an item's test stops at its first zero cell, so an absent item costs about
-- 1/(1 - fill) reads instead of k.
-- KEYS[1..s] the filter's shard keys (strings) that the batch touches.
-- ARGV[1] cell type: 'u1' (bit: GETBIT) or 'u4' (4-bit counter: BITFIELD_RO GET u4).
-- ARGV[2] k, the cells per item.
-- ARGV[3] '0': then k bit offsets per item, all in KEYS[1];
--         '1': then k pairs per item: the cell's key index in KEYS (1..s), its bit offset.
-- reply: a string with one character per item: '1' when all its cells are
--        non-zero, else '0'. A missing key reads as zeros.
-- Read-only. Needs Redis >= 6.2 (BITFIELD_RO).
local call = redis.call
local argv, keys = ARGV, KEYS
local typ, k, paired = argv[1], tonumber(argv[2]), argv[3] == '1'
local step = paired and 2 or 1
local n = (#argv - 3) / (k * step)
local out = {}
local a = 4
for i = 1, n do
  local present = '1'
  for j = 0, k - 1 do
    local key, off
    if paired then
      local c = a + 2 * j
      key, off = keys[tonumber(argv[c])], argv[c + 1]
    else
      key, off = keys[1], argv[a + j]
    end
    local v
    if typ == 'u1' then
      v = call('GETBIT', key, off)
    else
      v = call('BITFIELD_RO', key, 'GET', 'u4', off)[1]
    end
    if v == 0 then
      present = '0'
      break
    end
  end
  out[i] = present
  a = a + k * step
end
return table.concat(out)
