--!include clock.lua
-- react: a person's reaction on a message (added or taken back), as its event came: a job
-- for the control desk (which reads whose message it was, records it on the turn the answer
-- answered and hands it to the agent's hook), in one step with the event's dedupe.
-- KEYS: 1 click:react:<event id> (a string in the reacted message's slot: an event Feishu
--       delivers again counts once)  2 control (that slot's control stream)
-- ARGV: 1 app id  2 message id  3 emoji type  4 'added' | 'removed'  5 who (open_id)
--       6 when (Feishu's action_time, ms; 0: now on this server)  7 dedupe_ttl_s
--       8 control_cap
-- → 'noted' | 'duplicate'
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[7]) then return 'duplicate' end
local at = tonumber(ARGV[6]) or 0
if at <= 0 then
  local _, now_ms = clock()
  at = now_ms
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[8], '*', 'kind', 'reaction', 'app', ARGV[1],
           'task', ARGV[2], 'why', ARGV[3], 'command', ARGV[4], 'fence', ARGV[5],
           'sent_ms', str(at))
return 'noted'
