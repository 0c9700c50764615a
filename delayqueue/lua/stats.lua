-- stats.lua: the sizes of a queue's sets, read in one atomic step.
-- KEYS[1] scheduled; KEYS[2] ready; KEYS[3] inflight; KEYS[4] dead
-- reply: {scheduled, ready, inflight, dead}
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4])}
