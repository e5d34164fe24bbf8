--!include chat.lua
-- answer: keep the turn's answer before its first piece is sent, so a re-run resends it
-- instead of asking the agent again. ARGV: 1 fence  2 message_id  3 kind  4 chunks json
-- 5 '1' while processes of the version before may run (gateway/chats/upgrade.py): their
-- stop does not mark the lease
-- → 1 stored, 0 the turn lost its lease or was stopped: it must not reply
local lease = redis.call('HMGET', K.lease, 'fence', 'stopping')
if lease[1] ~= ARGV[1] then return 0 end
if stop_fields(lease[2], ARGV[5] == '1', 'fence')[1] == ARGV[1] then return 0 end
redis.call('HSET', K.tries, 'aid', ARGV[2], 'kind', ARGV[3], 'chunks', ARGV[4])
return 1
