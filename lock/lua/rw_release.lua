-- rw_release.lua: drop one hold level of one side of an RWMutex, by its
-- holder only, and wake whoever can go next when the holding ends.
-- KEYS as rw_acquire.lua (KEYS[2] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on; ARGV[5] call id (the same in every
-- resend of this call)
-- reply: -1 not held (expired, taken over or gone); else the hold count left.
--
-- Safe to run twice. The release that ends a holding leaves its call id in
-- the lock hash (r for the writer, u for readers) until the next such
-- release: a resend answers 0 again. With Owner, the call logs (see
-- rw_acquire.lua) record the count each release left, so a resend gets the
-- same answer and releases nothing more.
--
-- Wake-up messages name who may retry, so that only they do: 'r'..p the
-- waiting readers up to place p (those queued before the first waiting
-- writer), 'r' every waiting reader, 'w'..p the writer at place p. A writer's
-- release thus wakes the readers queued before the next writer, together; the
-- last reader's release wakes the next writer. With nobody queued (the lock
-- hash's flag q unset) a release publishes nothing and looks at no queue.
local now = clock(ARGV[1])
local owner, channel, call = ARGV[3], ARGV[4], ARGV[5]

local left, ended, flag, h
if ARGV[2] == 'w' then
  left, ended, h = release(KEYS[1], owner, call, now)
  flag = h[6]
else
  left, ended, h = sharedRelease(KEYS[1], owner, call, now)
  flag = h[6]
end
if not ended then return left end
rwWake(KEYS[1], flag, KEYS[3], KEYS[4], KEYS[5], channel, now)
return 0
