-- cancel.lua: a mutex acquire whose caller gave up without an answer (its
-- context ended or the connection failed during the call) must hold nothing,
-- whenever the acquire runs: before, after or twice around this script.
-- KEYS as acquire.lua (KEYS[5] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] call id of the
-- abandoned acquire; ARGV[4] ttl µs of the lease it asked for; ARGV[5]
-- channel to wake the next waiter on; ARGV[6] reentrant (1/0)
-- reply: 1 the call's hold level was given back; 0 it held nothing.
--
-- The tombstone (a field of the lock hash, until the lease's TTL has passed)
-- makes acquire.lua refuse the call if it lands later, or lands again. The caller leaves the waiter queue. When the
-- call holds the lock — without Owner: owner holds it, since the owner id is
-- this Lock call's own; with Owner: the call log names this call with the
-- live holding's token — its level is released as release.lua would, with
-- the wake-up. The log then names the cancel ('~'..call), so a second run
-- releases nothing more.
local now = clock(ARGV[1])
local owner, call = ARGV[2], ARGV[3]
-- The tombstone: field 'x'..call of the lock hash, until the lease's TTL
-- has passed (see bury; tombstones past their time go first).
bury(KEYS[1], call, ARGV[4], now)

unqueue(KEYS[3], KEYS[4], owner, '')
local left, h = cancel(KEYS[1], owner, call, ARGV[6] == '1', now)
if left > 0 then return 1 end
local undo = left == 0
if not undo and h[1] and tonumber(h[4]) > now then return 0 end
-- The lock is free: wake the longest live waiter, as release.lua does (this
-- caller may have consumed a wake-up meant to pass on).
local next = firstLive(KEYS[3], KEYS[4], now) or ''
if undo or next ~= '' then redis.call('PUBLISH', ARGV[5], next) end
if undo then return 1 end
return 0
