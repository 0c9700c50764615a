-- listdead.lua: the dead jobs that died first (ties: by id), without changing anything.
-- KEYS[1] dead (zset: id -> µs of death); KEYS[2] payloads (hash); KEYS[3] meta (hash: id -> "attempt:due_us")
-- ARGV[1] how many at most
-- reply: {id, payload, attempt, due_us, died_us, id, payload, ...}
local dead = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #dead, 2 do
  local id = dead[i]
  local attempt, due = string.match(redis.call('HGET', KEYS[3], id) or '0:0', '^(%d+):(%d+)$')
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
  out[#out + 1] = tonumber(attempt) or 0
  out[#out + 1] = tonumber(due) or 0
  out[#out + 1] = tonumber(dead[i + 1])
end
return out
