--!include drop.lua
--!include marks.lua
-- withdraw: the sender withdrew (recalled) a message. It is never answered: waiting, it is
-- dropped; held by a turn that did not start, it is dropped and the chat claimed again;
-- running, its turn is stopped as /stop stops one (drop.lua); one of a running merged
-- turn's messages stops that turn too, and the next turn answers the others. Its dedupe
-- mark becomes a tombstone ('withdrawn', marks.lua), so the message arriving after its
-- recall (events come out of order, and again) is never admitted. A recall does not say
-- when the message was created: the tombstone goes into the marks of every day whose marks
-- may still be kept (the candidates: dedupe_ttl_s and two days back, a day ahead, by the
-- writer's clock). Running it again changes nothing more.
-- KEYS: chat.lua's, then 9 seen:<message_id> (the layout before marks by day)  10 done
--       (history.lua)  11... the candidate marks (marks.lua), the last one the message's
--       own (a message without a create time)
-- ARGV: 1 message_id  2 chat_id
--       3 options (JSON): dedupe_ttl_s claim_ttl_ms queued_ttl_ms control_cap history_cap history_ttl_ms
--         flag_ttl_ms stop_hold_ms
--       4 the message's field in its marks  5 JSON: when each candidate's marks expire
-- → {'unknown'} (not waiting: not admitted yet, or answered already; the tombstone is set)
--   | drop_waiting's or stop_running's reply (drop.lua)
local opts = cjson.decode(ARGV[3])
redis.call('SET', KEYS[9], 'withdrawn', 'EX', opts.dedupe_ttl_s)
local now_us, now_ms = clock()
for n, expire_at in ipairs(cjson.decode(ARGV[5])) do
  set_mark(KEYS[10 + n], ARGV[4], 'withdrawn', expire_at, opts.dedupe_ttl_s,
           math.floor(now_ms / 1000))
end
local entry = find_entry(ARGV[1])
if not entry then return {'unknown'} end
local held = held_batch(entry)
if held and running(held[1]) then
  if #held == 1 then return stop_running(ARGV[2], 'withdrawn', opts) end
  -- one message of a running merged turn: the turn stops, the next answers the others;
  -- once the turn's answer is written (being sent) it is not unsaid: the turn ends as is
  redis.call('ZREM', K.inbox, entry)
  remember(KEYS[10], entry, 'withdrawn', '', redis.call('HGET', K.lease, 'fence') or '',
           redis.call('HGET', K.tries, 'n'), opts.history_cap, opts.history_ttl_ms, now_ms)
  if (redis.call('HGET', K.tries, 'aid') or '') ~= '' then return {'dropped'} end
  return stop_running(ARGV[2], 'withdrawn', opts, true)
end
return drop_waiting(ARGV[2], entry, 'withdrawn', opts, KEYS[10], now_us, now_ms, held)
