--!include chat.lua
--!include history.lua
-- complete: the turn of `fence` is done: drop its message and claim the next one; given a
-- task_id and a worker, the caller goes straight on with it (same task), so it starts here too.
-- KEYS: chat.lua's, then 9 done (history.lua)
-- ARGV: 1 fence  2 chat_id  3 outcome (how the turn ended, for the chat's history; ''
--       records nothing)  4 options (JSON): claim_ttl_ms queued_ttl_ms running_ttl_ms max_attempts
--       session_ttl_ms history_cap history_ttl_ms legacy_before_ms mixed (upgrade.py)
--       5 task_id  6 worker (only when the caller runs the next turn itself)
-- → {'stale'} | {'idle'} | {'claimed', fence, entry} (the next turn, to be published)
--   | {'started', fence, outcome, entry, generation, attempt, answer_kind, answer_chunks,
--      batch}
-- A turn whose stop flag names why it was stopped (`why` of the stop hash: withdrawn,
-- removed) is recorded so instead of 'stopped'.
-- A merged turn (busy modes merge, interrupt) drops every message of its batch, each recorded with the
-- turn's outcome; under busy mode merge or interrupt the next turn is only claimed
-- (published), so that start.lua fixes its batch. A turn an interrupt stopped drops nothing:
-- its messages are recorded `interrupted` and the next turn answers them with the new ones.
local lease = redis.call('HMGET', K.lease, 'fence', 'entry', 'task_id', 'busy', 'stopping')
if lease[1] ~= ARGV[1] then return {'stale'} end
local opts = cjson.decode(ARGV[4])
local now_us, now_ms = clock()
local tries = redis.call('HMGET', K.tries, 'n', 'batch', 'fence')
local stop = stop_fields(lease[5], opts.mixed, 'fence', 'keep', 'why')
local busy = lease_busy(lease[4], opts.mixed)
local flagged = stop[1] == ARGV[1]  -- asked to stop
local kept = flagged and stop[2] == '1'  -- an interrupt: its messages go into the next turn
local outcome = ARGV[3]
if outcome == 'stopped' and flagged then
  -- a turn stopped because its message was withdrawn or the bot removed says so
  outcome = stop[3] or outcome
  if outcome == '' then outcome = 'stopped' end
end
if lease[2] then
  for _, e in ipairs(turn_entries(lease[2], tries[2])) do
    if not kept then
      if redis.call('ZREM', K.inbox, e) == 1 then  -- (not one dropped and recorded before)
        remember(KEYS[9], e, outcome, lease[3], lease[1], tries[1], opts.history_cap,
                 opts.history_ttl_ms, now_ms)
      end
    elseif redis.call('ZSCORE', K.inbox, e) then  -- (not one withdrawn meanwhile)
      remember(KEYS[9], e, 'interrupted', lease[3], lease[1], tries[1], opts.history_cap,
               opts.history_ttl_ms, now_ms)
    end
  end
end
local known = {fence = tries[3], busy = busy}
if not ARGV[5] or merging(busy) then
  local c = claim(ARGV[2], now_us, now_ms, opts.claim_ttl_ms, true, nil, nil, known,
                  opts.queued_ttl_ms)
  if not c then return {'idle'} end
  return {'claimed', c[1], c[2]}
end
local c = claim(ARGV[2], now_us, now_ms, opts.running_ttl_ms, true, {ARGV[5], ARGV[6]}, nil,
                known)
if not c then return {'idle'} end
-- (a fresh head, its attempt counted; claim emptied its batch)
local s = begin(c[2], opts.max_attempts, opts.session_ttl_ms, 1, '', 0)
return {'started', c[1], s[1], s[2], s[3], s[4], s[5], s[6], s[7]}
