--!include chat.lua
--!include marks.lua
-- revise: the sender edited a message. Waiting (no turn started it), it is replaced by the
-- new version in its place; once started (alone, or in a merged turn's batch) or answered
-- it stays as it was (no second answer). An edit arriving before its message (events come
-- out of order) is kept, its dedupe mark says 'edited' (marks.lua), and ingest.lua admits
-- the message as edited. Only a newer edit (by
-- Feishu's update_time) replaces an older one, so a redelivered or late edit changes
-- nothing.
-- KEYS: chat.lua's, then 9 edit:<message_id>  10 seen:<message_id> (a mark of the layout
--       before marks by day)  11... the dedupe marks the message's may be in: its day's, or
--       (an edit without its message's create time) every day's that may still be kept
-- ARGV: 1 message_id  2 update_ms  3 the edited message json  4 dedupe_ttl_s
--       5 the message's field in its marks  6 JSON: when each of those marks expires
-- → {'revised'} | {'kept'} (before its message) | {'started'} (it runs or ran: unchanged)
--   | {'answered'} (it waits no more) | {'older'} (a newer edit was applied already)
local at = tonumber(ARGV[2]) or 0
local prior = tonumber(redis.call('HGET', KEYS[9], 'at') or '')
if prior and prior >= at then return {'older'} end
local function record(json)
  redis.call('HSET', KEYS[9], 'at', str(at), 'json', json)
  redis.call('EXPIRE', KEYS[9], ARGV[4])
end
local found = find_entry(ARGV[1])
if not found then
  local expiries = cjson.decode(ARGV[6])
  local mark = redis.call('GET', KEYS[10])
  for n = 1, #expiries do
    mark = mark or redis.call('HGET', KEYS[10 + n], ARGV[5])
  end
  if mark and mark ~= 'edited' then return {'answered'} end
  record(ARGV[3])
  local _, now_ms = clock()
  for n, expire_at in ipairs(expiries) do
    set_mark(KEYS[10 + n], ARGV[5], 'edited', expire_at, ARGV[4], math.floor(now_ms / 1000))
  end
  return {'kept'}
end
local lease = redis.call('HMGET', K.lease, 'state', 'entry', 'fence')
local tries = redis.call('HMGET', K.tries, 'head', 'n')
local function in_started_batch()  -- one of the messages a merged turn fixed at its start
  return tries[1] ~= found and turn_holding(tries[1], found)
end
-- (a turn an interrupt stopped leaves its messages to the next turn: they take edits still)
if not (lease[3] and interrupted(lease[3])) and ((lease[2] == found and lease[1] == 'running')
   or (tries[1] == found and tonumber(tries[2] or '0') > 0) or in_started_batch()) then
  return {'started'}
end
local b = string.find(found, '|', string.find(found, '|', 1, true) + 1, true)
local edited = string.sub(found, 1, b)
  .. keep_caught_up(ARGV[3], string.find(found, '"caught_up":true', b, true))
local score = redis.call('ZSCORE', K.inbox, found)
redis.call('ZREM', K.inbox, found)
redis.call('ZADD', K.inbox, score, edited)
if lease[2] == found then redis.call('HSET', K.lease, 'entry', edited) end
if tries[1] == found then redis.call('HSET', K.tries, 'head', edited) end
record('')
return {'revised'}
