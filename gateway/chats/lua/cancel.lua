--!include chat.lua
--!include history.lua
-- cancel: the state change of /stop, /new, `feishu-gateway stop`, in one step, recorded under
-- the command's id so that running it again (its listener died) finishes it, never repeats it.
-- KEYS: chat.lua's, then 9 cmd:<command_id> (the record), 10 done (history.lua)
-- ARGV: 1 command_id  2 chat_id
--       3 target: the fence the command is about ('' none held the chat, '*' the current)
--       4 options (JSON): debounce_ms record_ttl_ms
--         new_session (true: start a new conversation too; false also when the ingest step
--         of the /new already did)
--         only_queued (true: a running turn is left to run: 'nothing'; a revoked copy of it)
--         claim_ttl_ms queued_ttl_ms session_ttl_ms history_cap history_ttl_ms stop_hold_ms (a running
--         turn's lease lives at least this long once flagged: chat.lua hold_for_canceller)
--         sent_ms (the command's create_time: under busy mode merge or interrupt a turn not
--         yet started drops the waiting messages sent up to it; 0 or absent: all of them)
--         interrupt (busy mode interrupt: the id of the new message that stops the running
--         turn, whose messages are kept for the next turn (stop `keep`); a turn not running,
--         or a new message no longer waiting (withdrawn), is left alone: 'nothing'; false: a
--         stop)
-- → {how, fence, task_id, waiting[, next_fence, next_entry]} (next: the turn claimed after
--   the dropped one, to be published) where how is
--   'again'       this command ran before: how/fence/task_id/waiting as recorded
--   'debounced'   another debounced stop came within debounce_ms: this one does nothing
--                 more (a stop with debounce_ms 0 neither is nor starts a debounce); its
--                 fence and task_id are those of another turn that runs now, one the
--                 earlier stop did not end ('' when none: that stop's turn still holds)
--   'nothing'     the turn it is about is not holding the chat (none, or already over)
--   'not-started' the turn had not started: the message it would run is dropped (the oldest
--                 waiting one, see start.lua) and the next one claimed
--   'running'     the flag is up: the turn sees it, stops extending its lease and ends; the
--                 canceller completes it after the timeout if it does not
local rec = redis.call('HMGET', KEYS[9], 'how', 'fence', 'task_id', 'waiting')
if rec[1] then return {'again', rec[1], rec[2] or '', rec[3] or '', rec[4] or '0'} end
local now_us, now_ms = clock()
local opts = cjson.decode(ARGV[4])
local ttl = opts.record_ttl_ms
if opts.new_session then renew_session(now_ms, opts.session_ttl_ms) end
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'task_id', 'entry')
local fence, state, task_id, entry = lease[1], lease[2], lease[3] or '', lease[4]
local behind = redis.call('ZCARD', K.inbox)
if fence then behind = behind - 1 end
local function record(how, f, t)
  redis.call('HSET', KEYS[9], 'how', how, 'fence', f, 'task_id', t, 'waiting',
             tostring(behind))
  redis.call('PEXPIRE', KEYS[9], ttl)
  return {how, f, t, tostring(behind)}
end
local debounce_ms = opts.debounce_ms
local last = tonumber(redis.call('HGET', K.stop, 'at_ms') or '')
if last and now_ms >= last and now_ms - last < debounce_ms then  -- (not past a step back)
  if fence and fence ~= redis.call('HGET', K.stop, 'fence') then
    return record('debounced', fence, task_id)
  end
  return record('debounced', '', '')
end
if debounce_ms > 0 then
  -- only a debounced stop (a user's) starts the debounce: an operator's (debounce 0, the
  -- CLI, a Flower revoke) must not turn the users' own /stop into 'debounced'
  redis.call('HSET', K.stop, 'at_ms', str(now_ms))
  redis.call('PEXPIRE', K.stop, ttl)
end
local target = ARGV[3]
if not fence or target == '' or (target ~= '*' and target ~= fence) then
  return record('nothing', '', '')
end
if state == 'running' then
  if opts.only_queued then return record('nothing', '', '') end
  local flagged = redis.call('HGET', K.stop, 'fence') == fence
  if opts.interrupt then
    -- an interrupt never undoes another stop (a /stop, a withdraw, the bot removed), nor
    -- cuts a turn whose answer is written (it is being sent)
    if flagged or (redis.call('HGET', K.tries, 'aid') or '') ~= ''
        or not find_entry(opts.interrupt) then
      return record('nothing', '', '')
    end
    redis.call('HSET', K.stop, 'fence', fence, 'entry', entry or '', 'task', task_id, 'why',
               'stopped', 'keep', '1')
  elseif flagged then  -- flagged before: its messages go now, the first stop's why stays
    redis.call('HSET', K.stop, 'keep', '')
  else
    redis.call('HSET', K.stop, 'fence', fence, 'entry', entry or '', 'task', task_id, 'why',
               'stopped', 'keep', '')
  end
  redis.call('PEXPIRE', K.stop, ttl)
  redis.call('HSET', K.lease, 'stopping', '1')
  hold_for_canceller(opts.stop_hold_ms)
  if entry then  -- a merged turn holds several of them
    behind = redis.call('ZCARD', K.inbox) - #turn_entries(entry)
  end
  return record('running', fence, task_id)
end
if opts.interrupt then  -- not running yet: the new message joins the turn when it starts
  return record('nothing', '', '')
end
local dropped = {}
if entry then
  local n = redis.call('HGET', K.tries, 'n')
  if n == '0' then
    -- never started: it would run the oldest waiting message (start.lua), so that one goes;
    -- merging, it would take every waiting message sent before the command
    entry = redis.call('ZRANGE', K.inbox, 0, 0)[1] or entry
    dropped = {entry}
    if merging() then
      local sent = opts.sent_ms and opts.sent_ms > 0 and str(opts.sent_ms) or '+inf'
      dropped = redis.call('ZRANGEBYSCORE', K.inbox, '-inf', sent)
      if #dropped == 0 then dropped = {entry} end
    end
  else
    dropped = turn_entries(entry)  -- started before (a crash): its batch
  end
  for _, e in ipairs(dropped) do
    redis.call('ZREM', K.inbox, e)
    remember(KEYS[10], e, 'stopped', task_id, fence, n, opts.history_cap,
             opts.history_ttl_ms, now_ms)
  end
  behind = redis.call('ZCARD', K.inbox)
end
local r = record('not-started', fence, task_id)
local c = claim(ARGV[2], now_us, now_ms, opts.claim_ttl_ms, true, nil, nil, nil,
                opts.queued_ttl_ms)  -- its head was dropped
if c then
  r[5], r[6] = c[1], c[2]
end
return r
