--!include chat.lua
--!include marks.lua
-- ingest: dedupe + admit one message, atomically.
-- KEYS: chat.lua's, then 9 the dedupe marks of the message's day (marks.lua)  10 done
--       (history.lua)  11 edit:<message_id> (the edit that came first, read only then)  12 left (when the bot was removed, evict.lua)
--       13 active (the shard's recently active chats of the app, read by catch-up: keys.py
--          active_key)  14 seen:<message_id> (a mark of the layout before marks by day)
--       15 latenote (the chat was told of its late messages within LATE_NOTE_EVERY_MS)
-- ARGV: 1 message_id  2 chat_id  3 create_ms  4 command ('' for a message)  5 message json
--       6 options (JSON): dedupe_ttl_s inbox_cap claim_ttl_ms queued_ttl_ms control_cap (the control
--         stream's) session_ttl_ms history_cap history_ttl_ms late_after_ms (0: never late)
--         late_events ('note' | 'drop') busy (the chat's busy mode: 'merge' | 'interrupt';
--         absent: queue) active_cap (chats kept in the active index; 0: none written)
--         caught_up (true: read back after an outage; a command then is late, never run)
--         legacy_before_ms mixed (the version before may still run, or have admitted
--         the message: key 15 too, gateway/chats/upgrade.py)
--         own (true: a message the bot starts, gateway/chats/outbound.py: it leaves the
--         chat's busy mode as it is and never interrupts a running turn)
--       7 the chat's member of the active index ('<app_id>|<chat_type>|<chat_id>')
--       8 the message's field in its marks (keys.py mark_field)  9 when its marks expire
--       (marks.lua keep_marks)
-- Busy mode interrupt: a message for a chat whose turn runs also writes an 'interrupt' job
-- (the running turn's fence) for the control desk, unless that turn was asked to stop.
-- → {'duplicate'} | {'withdrawn'} (its sender recalled it before it came: withdraw.lua)
--   | {'left'} (sent before the bot was removed from the chat) | {'command'} | {'late', age_ms}
--   | {'full', waiting} | {'queued', waiting}
--   | {'claimed', waiting, fence, entry} (the chat was idle: its turn, to be published)
-- A message (or command) whose create_time is more than late_after_ms before now, on this
-- server's clock (the one every host shares), is late: it is not run, and with 'note' its
-- chat is told so through the control stream, once for all the late messages of an outage
-- (at most once every LATE_NOTE_EVERY_MS: the first one's reply says it for the rest). So is a command read back after an outage
-- (caught_up): it would act on whatever runs now, not on what its user saw then.
-- Every message that is not a duplicate marks its chat active (key 14: newest active_cap
-- kept), so catch-up knows which chats to read back after an outage.
-- Commands and the "not queued" notice go to the control stream in the same step, so no crash
-- can mark them seen without something durable to act on; a command carries the fence that
-- held the chat when it arrived ('' if none): the turn it is about. /new renews the session
-- here, so every message admitted after it belongs to the new conversation (the job says
-- `renewed`: the desk does not renew it again).
local LATE_NOTE_EVERY_MS = 600000
local ACTIVE_TTL_MS = 86400000  -- the longest catch-up window
local opts = cjson.decode(ARGV[6])
local created = tonumber(ARGV[3]) or 0
local now_us, now_ms = clock()
local mark, edited = false, false
if redis.call('HSETNX', KEYS[9], ARGV[8], '1') == 0 then
  mark = redis.call('HGET', KEYS[9], ARGV[8])
else
  keep_marks(KEYS[9], ARGV[9], opts.dedupe_ttl_s, math.floor(now_ms / 1000))
  -- the version before kept a key per message (gateway/chats/upgrade.py): while it may
  -- still run, both are checked and written; after, a message older than this version
  -- may still have one
  local legacy = opts.mixed or created < (opts.legacy_before_ms or 0)
  if opts.mixed then
    mark = redis.call('SET', KEYS[14], '1', 'NX', 'EX', opts.dedupe_ttl_s, 'GET')
  elseif legacy then
    mark = redis.call('GET', KEYS[14])
  end
  if mark then
    redis.call('HSET', KEYS[9], ARGV[8], mark)
  elseif legacy then  -- ('edited' was no mark then: an edit that came first is in its hash)
    edited = redis.call('HGET', KEYS[11], 'json')
  end
end
if mark then
  if mark == 'withdrawn' then return {'withdrawn'} end
  if mark ~= 'edited' then return {'duplicate'} end
  redis.call('HSET', KEYS[9], ARGV[8], '1')
  edited = redis.call('HGET', KEYS[11], 'json')
end
local active = (opts.active_cap or 0) > 0 and ARGV[7] and ARGV[7] ~= ''
if active then
  -- (the set grows only by a new chat: trimmed then, in batches)
  if redis.call('ZADD', KEYS[13], str(now_ms), ARGV[7]) == 1 then
    if redis.call('ZCARD', KEYS[13]) > opts.active_cap + 64 then
      redis.call('ZREMRANGEBYRANK', KEYS[13], 0, -(opts.active_cap + 1))
    end
    redis.call('PEXPIRE', KEYS[13], ACTIVE_TTL_MS)
    active = false
  end
end
local late_after = opts.late_after_ms
local left = tonumber(redis.call('GET', KEYS[12]) or '')
if left and created > 0 and created <= left then return {'left'} end
local stored = ARGV[5]
if edited and edited ~= '' then stored = keep_caught_up(edited, opts.caught_up) end
local stale_command = opts.caught_up and ARGV[4] ~= ''
if stale_command or (late_after > 0 and created > 0 and now_ms - created > late_after) then
  if opts.late_events ~= 'drop'
     and redis.call('SET', KEYS[15], '1', 'NX', 'PX', LATE_NOTE_EVERY_MS) then
    redis.call('XADD', K.control, 'MAXLEN', '~', opts.control_cap, '*', 'kind', 'late', 'chat',
               ARGV[2], 'message', ARGV[5])
  end
  return {'late', str(now_ms - created)}
end
if ARGV[4] ~= '' then
  local renewed = '0'
  if ARGV[4] == 'new' then
    renew_session(now_ms, opts.session_ttl_ms)
    renewed = '1'
  end
  redis.call('XADD', K.control, 'MAXLEN', '~', opts.control_cap, '*', 'kind', 'command', 'chat',
             ARGV[2], 'command', ARGV[4], 'fence', redis.call('HGET', K.lease, 'fence') or '',
             'renewed', renewed, 'message', ARGV[5])
  return {'command'}
end
local waiting = redis.call('ZCARD', K.inbox)
if waiting >= opts.inbox_cap then
  redis.call('XADD', K.control, 'MAXLEN', '~', opts.control_cap, '*', 'kind', 'inbox-full',
             'chat', ARGV[2], 'waiting', waiting, 'message', ARGV[5])
  return {'full', waiting}
end
local score = created
if score <= 0 then score = now_ms end
local entry = string.format('%016.0f|%s|%s', now_us, ARGV[1], stored)
redis.call('ZADD', K.inbox, str(score), entry)
-- the chat's busy mode lives in its state (tries, while the chat is active, and its copy in
-- the lease), read by every worker's start and complete: the latest message's setting wins
local busy = opts.busy or ''
if opts.own then busy = redis.call('HGET', K.tries, 'busy') or '' end
local function mark_busy()
  if busy ~= '' and redis.call('EXISTS', K.tries) == 1 then  -- (claim gave it its TTL)
    redis.call('HSET', K.tries, 'busy', busy)
  else
    redis.call('HDEL', K.tries, 'busy')
  end
end
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'busy')
if lease[1] then  -- (a lease always has its sweeper deadline)
  if lease[3] ~= busy or opts.mixed then  -- (the version before reads tries' only)
    mark_busy()
    redis.call('HSET', K.lease, 'busy', busy)
  end
  -- (one read back after an outage waits for the next turn rather than stop the one
  -- answering what was read back before it)
  if opts.busy == 'interrupt' and lease[2] == 'running' and not opts.caught_up
     and redis.call('HGET', K.stop, 'fence') ~= lease[1]
     and (redis.call('HGET', K.tries, 'aid') or '') == '' then
    -- stop the running turn (the control desk, as /stop), unless it is sending an answer
    -- it already kept
    redis.call('XADD', K.control, 'MAXLEN', '~', opts.control_cap, '*', 'kind', 'interrupt',
               'chat', ARGV[2], 'fence', lease[1], 'message', ARGV[5])
  end
  return {'queued', waiting}
end
-- (the active index lives a day from its last new chat or idle chat's message: a chat
-- that becomes active refreshes it, one that stays active need not)
if active then redis.call('PEXPIRE', KEYS[13], ACTIVE_TTL_MS) end
local c = claim(ARGV[2], now_us, now_ms, opts.claim_ttl_ms, false, nil,
                {KEYS[10], opts.history_cap, opts.history_ttl_ms},
                {busy = busy, oldest = waiting == 0 and entry or nil}, opts.queued_ttl_ms)
if not c[3] then mark_busy() end  -- (a fresh head's tries got it from the claim)
return {'claimed', waiting, c[1], c[2]}
