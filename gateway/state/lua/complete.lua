--!include chat.lua
-- complete: the turn of `fence` is done: drop its message and claim the next one.
-- ARGV: 1 fence  2 claim_ttl_ms  3 chat_id   → {'stale'} | {'idle'} | {'dispatch', fence, entry}
if redis.call('HGET', K.lease, 'fence') ~= ARGV[1] then return {'stale'} end
local entry = redis.call('HGET', K.lease, 'entry')
if entry then redis.call('ZREM', K.inbox, entry) end
redis.call('DEL', K.answer)
local now_us, now_ms = clock()
local c = claim(ARGV[3], now_us, now_ms, tonumber(ARGV[2]))
if not c then return {'idle'} end
return {'dispatch', c[1], c[2]}
