-- add.lua: add a batch of items to a Bloom filter: set every cell (bitmap) or
-- increment it, saturating at 15 and never wrapping (counting filter).
-- KEYS[1..s] the filter's shard keys (strings) that the batch touches.
-- ARGV[1] cell type: 'u1' (bit: BITFIELD SET to 1) or 'u4' (4-bit counter:
--         BITFIELD OVERFLOW SAT INCRBY 1).
-- ARGV[2..s+1] how many cells of KEYS[1..s] follow;
-- ARGV[s+2..] the cells' bit offsets, shard after shard, items in call order.
-- reply: a string with one character per cell, in argument order: '1' when
--        the cell was non-zero before this call's write to it, else '0'.
-- The caller computes every offset (Redis never hashes) and sends at most
-- 8192 cells per call. Needs Redis >= 3.2 (BITFIELD).
-- Ops per BITFIELD: far under unpack's limit of 8000 values. On Redis 7.0, commands
-- of 64 to 1000 ops cost the same per op within measurement noise.
local CHUNK = 256
local ARGV, KEYS = ARGV, KEYS
local typ = ARGV[1]
local s = #KEYS
local a = s + 2
local out = {}
for i = 1, s do
  local left = tonumber(ARGV[i + 1])
  while left > 0 do
    local c = math.min(left, CHUNK)
    local args, j = {}, 0
    if typ == 'u1' then
      for _ = 1, c do
        args[j + 1] = 'SET'; args[j + 2] = 'u1'; args[j + 3] = ARGV[a]; args[j + 4] = '1'
        j = j + 4; a = a + 1
      end
      -- SET replies with the old bits.
      out[#out + 1] = table.concat(redis.call('BITFIELD', KEYS[i], unpack(args, 1, j)))
    else
      args[1] = 'OVERFLOW'; args[2] = 'SAT'; j = 2
      for _ = 1, c do
        args[j + 1] = 'INCRBY'; args[j + 2] = 'u4'; args[j + 3] = ARGV[a]; args[j + 4] = '1'
        j = j + 4; a = a + 1
      end
      -- INCRBY replies with the new values: 1 means the counter was 0.
      local r = redis.call('BITFIELD', KEYS[i], unpack(args, 1, j))
      for x = 1, c do
        if r[x] > 1 then r[x] = 1 else r[x] = 0 end
      end
      out[#out + 1] = table.concat(r)
    end
    left = left - c
  end
end
return table.concat(out)
