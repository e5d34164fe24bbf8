--!include chat.lua
-- start: a worker begins the turn of `fence`, if it still holds the chat and nobody started it.
-- KEYS: chat.lua's
-- ARGV: 1 fence  2 chat_id  3 task_id  4 worker
--       5 options (JSON): running_ttl_ms max_attempts session_ttl_ms
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
local opts = cjson.decode(ARGV[5])
local attempt = redis.call('HINCRBY', K.tries, 'n', 1)
if attempt == 1 and oldest ~= entry then
  entry = oldest
  redis.call('HSET', K.tries, 'head', entry)
end
redis.call('HSET', K.lease, 'state', 'running', 'task_id', ARGV[3], 'worker', ARGV[4],
           'since_ms', str(now_ms), 'entry', entry, 'message_id', entry_id(entry))
redis.call('PEXPIRE', K.lease, opts.running_ttl_ms)
redis.call('ZADD', K.index, str(now_ms + opts.running_ttl_ms), ARGV[2])
return begin(entry, opts.max_attempts, opts.session_ttl_ms, attempt)
