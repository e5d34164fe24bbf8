--!include clock.lua
-- note: an event with no chat of its own yet (a person's reaction, a bot menu click) noted
-- as a job for the control desk, which reads what the event leaves out (whose message was
-- reacted to; the person's direct chat), in one step with the event's dedupe.
-- KEYS: 1 click:note:<event id> (a string: an event Feishu delivers again counts once)
--       2 control (the control stream of the same slot)
-- ARGV: 1 dedupe_ttl_s  2 control_cap  3.. the job's fields, name then value ('sent_ms' '0':
--       when the event happened is unknown, now on this server is written)
-- → 'noted' | 'duplicate'
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 'duplicate' end
local job = {}
for i = 3, #ARGV, 2 do
  local value = ARGV[i + 1]
  if ARGV[i] == 'sent_ms' and (tonumber(value) or 0) <= 0 then
    local _, now_ms = clock()
    value = str(now_ms)
  end
  job[#job + 1] = ARGV[i]
  job[#job + 1] = value
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(job))
return 'noted'
