--!include chat.lua
-- cancel: the state change of /stop, in one step, recorded so it survives the canceller.
-- ARGV: 1 command_id  2 debounce_ms  3 flag_ttl_ms  4 claim_ttl_ms  5 chat_id
-- → {how, fence, task_id, waiting[, next_fence, next_entry]} where how is
--   'again'       this command ran before (a canceller died): how/fence/task_id as recorded
--   'debounced'   another /stop came within debounce_ms: this one does nothing
--   'nothing'     no turn held the chat
--   'not-started' the turn had not started: its message is dropped and the next one claimed
--   'running'     the flag is up: the turn sees it, stops extending its lease and ends; the
--                 canceller completes it after the timeout if it does not
local now_us, now_ms = clock()
if redis.call('HGET', K.stop, 'cmd') == ARGV[1] then
  local r = redis.call('HMGET', K.stop, 'how', 'fence', 'task_id', 'waiting')
  return {'again', r[1] or 'nothing', r[2] or '', r[3] or '', r[4] or '0'}
end
local waiting = redis.call('ZCARD', K.inbox)
local last = tonumber(redis.call('HGET', K.stop, 'at_ms') or '')
if last and now_ms - last < tonumber(ARGV[2]) then
  local behind = waiting
  if redis.call('EXISTS', K.lease) == 1 then behind = waiting - 1 end
  return {'debounced', '', '', tostring(behind)}
end
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'task_id', 'entry')
local fence, state, task_id, entry = lease[1], lease[2], lease[3] or '', lease[4]
local function record(how, behind)
  redis.call('DEL', K.stop)
  redis.call('HSET', K.stop, 'cmd', ARGV[1], 'at_ms', str(now_ms), 'how', how, 'fence',
             fence or '', 'task_id', task_id, 'entry', entry or '', 'waiting', tostring(behind))
  redis.call('PEXPIRE', K.stop, math.max(tonumber(ARGV[2]), tonumber(ARGV[3])))
end
if not fence then
  record('nothing', waiting)
  return {'nothing', '', '', tostring(waiting)}
end
local behind = waiting - 1
if state == 'running' then
  record('running', behind)
  return {'running', fence, task_id, tostring(behind)}
end
if entry then redis.call('ZREM', K.inbox, entry) end
redis.call('DEL', K.answer)
record('not-started', behind)
local c = claim(ARGV[5], now_us, now_ms, tonumber(ARGV[4]))
if not c then return {'not-started', fence, task_id, tostring(behind)} end
return {'not-started', fence, task_id, tostring(behind), c[1], c[2]}
