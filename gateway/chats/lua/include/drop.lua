--!include chat.lua
--!include history.lua
-- drop.lua: a message leaves its chat for good, not by a turn's end: its sender withdrew it
-- (withdraw.lua) or the bot was removed from the chat (evict.lua).

-- The entries of the turn whose lease holds `entry` (its head, or one of the batch a merged
-- turn fixed at its start: busy modes merge, interrupt); false when no turn holds it.
local function held_batch(entry)
  return turn_holding(redis.call('HGET', K.lease, 'entry'), entry)
end

-- Whether `entry` is the one a running turn holds (its lease says running).
local function running(entry)
  local lease = redis.call('HMGET', K.lease, 'state', 'entry')
  return lease[1] == 'running' and lease[2] == entry
end

-- Raise the running turn's stop flag, as /stop does (cancel.lua), with `why` its outcome in
-- the history, and write a `stopping` control job: a desk waits for the turn to end and
-- fences it after GATEWAY_CANCEL_TIMEOUT. The flag outlives the lease, so a turn whose
-- worker died is dropped when its lease runs out, never run again. A turn already flagged
-- gets no second job (a /stop's desk, or this step's earlier run, ends it). `keep`: the
-- turn's other messages stay for the next turn (a merged turn lost one of its messages),
-- unless a /stop already dropped them all.
-- → {'stopping', fence, task_id}
local function stop_running(chat, why, opts, keep)
  local lease = redis.call('HMGET', K.lease, 'fence', 'task_id', 'entry')
  local prior = redis.call('HMGET', K.stop, 'fence', 'why', 'keep')
  local flagged = prior[1] == lease[1]
  if flagged and prior[3] ~= '1' then  -- a /stop, withdraw or removal came first: it stands
    keep = false
    if prior[2] and prior[2] ~= '' then why = prior[2] end
  end
  redis.call('HSET', K.stop, 'fence', lease[1], 'entry', lease[3] or '', 'task',
             lease[2] or '', 'why', why, 'keep', keep and '1' or '')
  redis.call('PEXPIRE', K.stop, opts.flag_ttl_ms)
  if lease[1] then
    redis.call('HSET', K.lease, 'stopping', '1')
    hold_for_canceller(opts.stop_hold_ms)
  end
  if not flagged then
    redis.call('XADD', K.control, 'MAXLEN', '~', opts.control_cap, '*', 'kind', 'stopping',
               'chat', chat, 'fence', lease[1], 'task', lease[2] or '', 'why', why)
  end
  return {'stopping', lease[1], lease[2] or ''}
end

-- Take `entry` (not a running turn's) out of the inbox and record it as `why`. When a lease
-- holds it (`held`: claimed or queued, not started or pinned after its worker died; in a
-- merged turn's batch too) the chat is claimed again under a new fence, so the turn already
-- published finds itself stale and the next one leaves the entry out.
-- → {'dropped'} | {'claimed', fence, entry} (the chat's next turn, to be published)
--   | {'idle'} (nothing waits any more)
local function drop_waiting(chat, entry, why, opts, done_key, now_us, now_ms, held)
  local lease = redis.call('HMGET', K.lease, 'fence', 'entry', 'task_id')
  local fence = lease[1] or redis.call('HGET', K.tries, 'fence') or ''
  redis.call('ZREM', K.inbox, entry)
  remember(done_key, entry, why, lease[2] == entry and lease[3] or '', fence,
           redis.call('HGET', K.tries, 'n'), opts.history_cap, opts.history_ttl_ms, now_ms)
  if not lease[1] or not held then return {'dropped'} end
  local c = claim(chat, now_us, now_ms, opts.claim_ttl_ms, true, nil, nil, nil,
                  opts.queued_ttl_ms)
  if not c then return {'idle'} end
  return {'claimed', c[1], c[2]}
end
