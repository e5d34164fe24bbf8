--!include chat.lua
--!include history.lua
-- complete: the turn of `fence` is done: drop its message and claim the next one; with
-- run_next = '1' the caller goes straight on with it (same task), so it starts here too.
-- ARGV: 1 fence  2 claim_ttl_ms  3 chat_id  4 run_next  5 task_id  6 worker
--       7 running_ttl_ms  8 max_attempts  9 session_ttl_ms
--       10 outcome (how the turn ended, for the chat's history; '' records nothing)
--       11 history_cap  12 history_ttl_ms
--       (KEYS 10: done, see history.lua)
-- → {'stale'} | {'idle'} | {'dispatch', fence, entry}
--   | {'started', fence, outcome, entry, generation, attempt, answer_kind, answer_chunks}
local lease = redis.call('HMGET', K.lease, 'fence', 'entry', 'task_id')
if lease[1] ~= ARGV[1] then return {'stale'} end
if lease[2] then redis.call('ZREM', K.inbox, lease[2]) end
local now_us, now_ms = clock()
remember(KEYS[10], lease[2], ARGV[10], lease[3], lease[1], redis.call('HGET', K.tries, 'n'),
         ARGV[11], ARGV[12], now_ms)
if ARGV[4] ~= '1' then
  local c = claim(ARGV[3], now_us, now_ms, tonumber(ARGV[2]), true)
  if not c then return {'idle'} end
  return {'dispatch', c[1], c[2]}
end
local c = claim(ARGV[3], now_us, now_ms, tonumber(ARGV[7]), true, {ARGV[5], ARGV[6]})
if not c then return {'idle'} end
local s = begin(c[2], ARGV[8], ARGV[9], 1)  -- `done`: always a fresh head, counted by claim
return {'started', c[1], s[1], s[2], s[3], s[4], s[5], s[6]}
