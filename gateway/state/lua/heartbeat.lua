--!include chat.lua
-- heartbeat: extend a running turn's lease, unless it lost it or was asked to stop.
-- ARGV: 1 fence  2 running_ttl_ms   → 0 lost, 1 held, 2 stopped (and no longer extended)
if redis.call('HGET', K.lease, 'fence') ~= ARGV[1] then return 0 end
if redis.call('HGET', K.stop, 'fence') == ARGV[1] then return 2 end
redis.call('PEXPIRE', K.lease, ARGV[2])
return 1
