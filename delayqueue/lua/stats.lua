-- stats.lua: the number of jobs in each state, read in one atomic step.
-- KEYS[1] scheduled; KEYS[2] an older version's ready set (see take.lua); KEYS[3] inflight; KEYS[4] dead
-- ARGV[1] now µs or "" for TIME
-- reply: {scheduled (not yet due), ready (due, not yet leased), inflight, dead}
local now = clock(ARGV[1])
local due = redis.call('ZCOUNT', KEYS[1], '-inf', string.format('%d', now))
return {redis.call('ZCARD', KEYS[1]) - due, due + redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4])}
