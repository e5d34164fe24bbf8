--!include chat.lua
-- heartbeat: is a running turn still the chat's and not asked to stop? With `extend` = '1',
-- also extend its lease and push the chat's sweeper deadline along (a running turn whose
-- worker lives is never looked at by a sweeper).
-- ARGV: 1 fence  2 running_ttl_ms  3 extend ('1' | '0')  4 chat_id
-- → 0 lost, 1 held, 2 stopped (and no longer extended)
local lease = redis.call('HGET', K.lease, 'fence')
if lease ~= ARGV[1] then return 0 end
if redis.call('HGET', K.stop, 'fence') == ARGV[1] then return 2 end
if ARGV[3] == '1' then
  local _, now_ms = clock()
  redis.call('PEXPIRE', K.lease, ARGV[2])
  redis.call('ZADD', K.index, 'XX', str(now_ms + tonumber(ARGV[2])), ARGV[4])
end
return 1
