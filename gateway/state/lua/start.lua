--!include chat.lua
-- start: a worker begins the turn of `fence`, if it still holds the chat and nobody started it.
-- ARGV: 1 fence  2 task_id  3 worker  4 running_ttl_ms  5 chat_id  6 max_attempts
--       7 session_ttl_ms
-- → {'stale'} | {'run' | 'poison', entry, generation, attempt, answer_kind, answer_chunks}
if redis.call('HGET', K.lease, 'fence') ~= ARGV[1] then return {'stale'} end
if redis.call('HGET', K.lease, 'state') == 'running' then return {'stale'} end
local entry = redis.call('HGET', K.lease, 'entry')
if not entry or not redis.call('ZSCORE', K.inbox, entry) then return {'stale'} end
local _, now_ms = clock()
local ttl = tonumber(ARGV[4])
redis.call('HSET', K.lease, 'state', 'running', 'task_id', ARGV[2], 'worker', ARGV[3],
           'since_ms', str(now_ms))
redis.call('HDEL', K.lease, 'requeue_at_ms', 'requeues')
redis.call('PEXPIRE', K.lease, ttl)
redis.call('ZADD', K.index, str(now_ms + ttl), ARGV[5])
local id = entry_id(entry)
local attempt = redis.call('HINCRBY', K.tries, id, 1)
redis.call('PEXPIRE', K.tries, KEEP_MS)
local gen = redis.call('GET', K.gen) or '0'
if gen ~= '0' then redis.call('PEXPIRE', K.gen, ARGV[7]) end
local kind, chunks = false, false
if redis.call('HGET', K.answer, 'message_id') == id then
  kind = redis.call('HGET', K.answer, 'kind')
  chunks = redis.call('HGET', K.answer, 'chunks')
end
local outcome = 'run'
if attempt > tonumber(ARGV[6]) then outcome = 'poison' end
return {outcome, entry, gen, attempt, kind, chunks}
