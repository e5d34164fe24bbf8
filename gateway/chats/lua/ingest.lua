--!include chat.lua
-- ingest: dedupe + admit one message, atomically. KEYS: chat.lua's, then 10 seen:<message_id>.
-- ARGV: 1 message_id  2 create_ms  3 message json  4 dedupe_ttl_s  5 inbox_cap  6 claim_ttl_ms
--       7 chat_id  8 command ('' for a message)  9 control stream cap  10 session_ttl_ms
--       11 history_cap  12 history_ttl_ms  13 late_after_ms (0: never late)
--       14 late_events ('note' | 'drop')   (KEYS 11: done, history.lua)
-- → {'duplicate'} | {'command'} | {'late', age_ms} | {'full', waiting} | {'queued', waiting}
--   | {'dispatch', waiting, fence, entry}
-- A message (or command) whose create_time is more than late_after_ms before now, on this
-- server's clock (the one every host shares), is late: it is not run, and with 'note' its
-- chat is told so through the control stream.
-- Commands and the "not queued" notice go to the control stream in the same step, so no crash
-- can mark them seen without something durable to act on; a command carries the fence that
-- held the chat when it arrived ('' if none): the turn it is about. /new renews the session
-- here, so every message admitted after it belongs to the new conversation (the job says
-- `renewed`: the desk does not renew it again).
if not redis.call('SET', KEYS[10], '1', 'NX', 'EX', ARGV[4]) then return {'duplicate'} end
local now_us, now_ms = clock()
local created, late_after = tonumber(ARGV[2]) or 0, tonumber(ARGV[13]) or 0
if late_after > 0 and created > 0 and now_ms - created > late_after then
  if ARGV[14] ~= 'drop' then
    redis.call('XADD', K.control, 'MAXLEN', '~', ARGV[9], '*', 'kind', 'late', 'chat', ARGV[7],
               'message', ARGV[3])
  end
  return {'late', str(now_ms - created)}
end
if ARGV[8] ~= '' then
  local renewed = '0'
  if ARGV[8] == 'new' then
    renew_session(now_ms, ARGV[10])
    renewed = '1'
  end
  redis.call('XADD', K.control, 'MAXLEN', '~', ARGV[9], '*', 'kind', 'command', 'chat', ARGV[7],
             'command', ARGV[8], 'fence', redis.call('HGET', K.lease, 'fence') or '',
             'renewed', renewed, 'message', ARGV[3])
  return {'command'}
end
local waiting = redis.call('ZCARD', K.inbox)
if waiting >= tonumber(ARGV[5]) then
  redis.call('XADD', K.control, 'MAXLEN', '~', ARGV[9], '*', 'kind', 'inbox-full', 'chat',
             ARGV[7], 'waiting', waiting, 'message', ARGV[3])
  return {'full', waiting}
end
local score = created
if score <= 0 then score = now_ms end
redis.call('ZADD', K.inbox, str(score), string.format('%016.0f|%s|%s', now_us, ARGV[1], ARGV[3]))
if redis.call('EXISTS', K.lease) == 1 then  -- (a lease always has its sweeper deadline)
  return {'queued', waiting}
end
local c = claim(ARGV[7], now_us, now_ms, tonumber(ARGV[6]), false, nil,
                {KEYS[11], ARGV[11], ARGV[12]})
return {'dispatch', waiting, c[1], c[2]}
