--!include chat.lua
-- complete: the turn of `fence` is done: drop its message and claim the next one.
-- ARGV: 1 fence  2 claim_ttl_ms  3 chat_id   → {'stale'} | {'idle'} | {'dispatch', fence, entry}
local lease = redis.call('HMGET', K.lease, 'fence', 'entry')
if lease[1] ~= ARGV[1] then return {'stale'} end
if lease[2] then redis.call('ZREM', K.inbox, lease[2]) end
redis.call('DEL', K.answer)
local now_us, now_ms = clock()
local c = claim(ARGV[3], now_us, now_ms, tonumber(ARGV[2]), true)
if not c then return {'idle'} end
return {'dispatch', c[1], c[2]}
