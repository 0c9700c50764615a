-- rw_cancel.lua: an acquire of one side of an RWMutex whose caller gave up
-- without an answer (its context ended or the connection failed during the
-- call) must hold nothing, whenever the acquire runs: before, after or twice
-- around this script.
-- KEYS as rw_acquire.lua
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] channel to wake waiters on; ARGV[5] call id of the abandoned
-- acquire; ARGV[6] ttl µs of the lease it asked for; ARGV[7] reentrant (1/0)
-- reply: 1 the call's hold level was given back; 0 it held nothing.
--
-- As cancel.lua: the tombstone (field 'x'..call of the lock hash, until the
-- lease's TTL has passed: see bury) makes rw_acquire.lua refuse the call if
-- it lands later; the caller leaves its queue; when the call holds a level
-- (without Owner: owner holds the side; with Owner: the holding's log names
-- the call with its token) that level is released and the log names the
-- cancel ('~'..call), so a second run releases nothing more; then whoever
-- can go now is woken, as rw_leave.lua does.
local now = clock(ARGV[1])
local side, owner, channel, call = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local reentrant = ARGV[7] == '1'
bury(KEYS[1], call, ARGV[6], now)

local myq = KEYS[3]
if side == 'w' then myq = KEYS[4] end
unqueue(myq, KEYS[5], owner, side)

local left
if side == 'w' then
  left = cancel(KEYS[1], owner, call, reentrant, now)
else
  left = sharedCancel(KEYS[1], owner, call, reentrant, now)
end
if left > 0 then return 1 end
rwWake(KEYS[1], redis.call('HGET', KEYS[1], 'q'), KEYS[3], KEYS[4], KEYS[5], channel, now)
if left == 0 then return 1 end
return 0
