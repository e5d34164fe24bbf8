--!include chat.lua
--!include history.lua
-- complete: the turn of `fence` is done: drop its message and claim the next one; given a
-- task_id and a worker, the caller goes straight on with it (same task), so it starts here too.
-- KEYS: chat.lua's, then 10 done (history.lua)
-- ARGV: 1 fence  2 chat_id  3 outcome (how the turn ended, for the chat's history; ''
--       records nothing)  4 options (JSON): claim_ttl_ms running_ttl_ms max_attempts
--       session_ttl_ms history_cap history_ttl_ms
--       5 task_id  6 worker (only when the caller runs the next turn itself)
-- A turn whose stop flag names why it was stopped (`why` of the stop hash: withdrawn,
-- removed) is recorded so instead of 'stopped'.
-- → {'stale'} | {'idle'} | {'claimed', fence, entry} (the next turn, to be published)
--   | {'started', fence, outcome, entry, generation, attempt, answer_kind, answer_chunks}
local lease = redis.call('HMGET', K.lease, 'fence', 'entry', 'task_id')
if lease[1] ~= ARGV[1] then return {'stale'} end
local opts = cjson.decode(ARGV[4])
if lease[2] then redis.call('ZREM', K.inbox, lease[2]) end
local now_us, now_ms = clock()
local outcome = ARGV[3]
if outcome == 'stopped' and redis.call('HGET', K.stop, 'fence') == ARGV[1] then
  -- a turn stopped because its message was withdrawn or the bot removed says so
  outcome = redis.call('HGET', K.stop, 'why') or outcome
end
remember(KEYS[10], lease[2], outcome, lease[3], lease[1], redis.call('HGET', K.tries, 'n'),
         opts.history_cap, opts.history_ttl_ms, now_ms)
if not ARGV[5] then
  local c = claim(ARGV[2], now_us, now_ms, opts.claim_ttl_ms, true)
  if not c then return {'idle'} end
  return {'claimed', c[1], c[2]}
end
local c = claim(ARGV[2], now_us, now_ms, opts.running_ttl_ms, true, {ARGV[5], ARGV[6]})
if not c then return {'idle'} end
local s = begin(c[2], opts.max_attempts, opts.session_ttl_ms, 1)  -- a fresh head, counted
return {'started', c[1], s[1], s[2], s[3], s[4], s[5], s[6]}
