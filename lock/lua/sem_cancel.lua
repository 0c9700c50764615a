-- sem_cancel.lua: a Semaphore acquire whose caller gave up without an answer
-- (its context ended or the connection failed during the call) must hold
-- nothing, whenever the acquire runs: before, after or twice around this
-- script.
-- KEYS as sem_acquire.lua
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits; ARGV[4]
-- channel to wake waiters on; ARGV[5] call id of the abandoned acquire;
-- ARGV[6] ttl µs of the lease it asked for; ARGV[7] reentrant (1/0)
-- reply: 1 the call's hold level was given back; 0 it held nothing.
--
-- As cancel.lua: the tombstone (field 'x'..call of the lock hash, until the
-- lease's TTL has passed: see bury) makes sem_acquire.lua refuse the call if
-- it lands later; the caller leaves the queue; when the call holds a level
-- (without Owner: owner holds a permit; with Owner: the holding's log names
-- the call with its token) that level is released and the log names the
-- cancel ('~'..call), so a second run releases nothing more; then the
-- waiters that free permits can admit are woken, as sem_leave.lua does.
local now = clock(ARGV[1])
local owner, permits, channel, call = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local reentrant = ARGV[7] == '1'
bury(KEYS[1], call, ARGV[6], now)

unqueue(KEYS[3], KEYS[4], owner, '')
local left = sharedCancel(KEYS[1], owner, call, reentrant, now)
if left > 0 then return 1 end
semWake(KEYS[1], redis.call('HGET', KEYS[1], 'q'), KEYS[3], KEYS[4], permits, channel, now)
if left == 0 then return 1 end
return 0
