--!include chat.lua
-- start: a worker begins the turn of `fence`, if it still holds the chat and nobody started it.
-- ARGV: 1 fence  2 task_id  3 worker  4 running_ttl_ms  5 chat_id  6 max_attempts
--       7 session_ttl_ms
-- → {'stale'} | {'run' | 'poison', entry, generation, attempt, answer_kind, answer_chunks}
-- The order is fixed here, not at the claim: on its first attempt the turn runs the chat's
-- oldest waiting message, which is not the claimed one when an older message arrived late
-- (refused during a blip, redelivered) between the claim and now. A message that already
-- started once keeps its place.
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'entry')
if lease[1] ~= ARGV[1] or lease[2] == 'running' then return {'stale'} end
local entry = lease[3]
if not entry then return {'stale'} end
local oldest = redis.call('ZRANGE', K.inbox, 0, 0)[1]
if oldest ~= entry and not redis.call('ZSCORE', K.inbox, entry) then return {'stale'} end
local _, now_ms = clock()
local attempt = redis.call('HINCRBY', K.tries, 'n', 1)
if attempt == 1 and oldest ~= entry then
  entry = oldest
  redis.call('HSET', K.tries, 'head', entry)
end
redis.call('HSET', K.lease, 'state', 'running', 'task_id', ARGV[2], 'worker', ARGV[3],
           'since_ms', str(now_ms), 'entry', entry, 'message_id', entry_id(entry))
redis.call('PEXPIRE', K.lease, ARGV[4])
redis.call('ZADD', K.index, str(now_ms + tonumber(ARGV[4])), ARGV[5])
return begin(entry, ARGV[6], ARGV[7], attempt)
