--!include chat.lua
-- stopclick: a Stop button clicked on the card streaming the answer of the turn of message
-- ARGV[2]: a stop job for the control desk, which ends the turn as /stop does (the same
-- cancel step, debounce and records), in one step with the click's dedupe.
-- KEYS: chat.lua's, then 9 click:<token> (a click Feishu delivers again counts once)
-- ARGV: 1 chat_id  2 the turn's message id (the lease's message_id)  3 the clicker's open_id
--       4 token  5 options (JSON): dedupe_ttl_s control_cap record_ttl_ms sent_ms (when the
--         click was made, Feishu's clock; 0: unknown, now on this server's)
-- → {'duplicate'} | {'over'} (that turn no longer holds the chat) | {'stopping', fence}
-- The clicker is kept as the stop's `by` for the turn's fence (stop hash: by, by_fence), so
-- its card can say who stopped it; a turn already asked to stop keeps who asked first. The
-- job carries when the click was made (`sent_ms`), as a /stop carries its create_time: a
-- turn that did not start yet (merging, in its window: an interrupted turn's messages and
-- the new one) drops what was sent up to the click, never what was sent after it.
local opts = cjson.decode(ARGV[5])
if not redis.call('SET', KEYS[9], '1', 'NX', 'EX', opts.dedupe_ttl_s) then
  return {'duplicate'}
end
local lease = redis.call('HMGET', K.lease, 'fence', 'message_id')
local fence = lease[1]
if not fence or lease[2] ~= ARGV[2] then return {'over'} end
local stop = redis.call('HMGET', K.stop, 'fence', 'by_fence')
if stop[1] ~= fence and stop[2] ~= fence then
  redis.call('HSET', K.stop, 'by', ARGV[3], 'by_fence', fence)
  if redis.call('PTTL', K.stop) < opts.record_ttl_ms then
    redis.call('PEXPIRE', K.stop, opts.record_ttl_ms)
  end
end
local sent = tonumber(opts.sent_ms) or 0
if sent <= 0 then
  local _, now_ms = clock()
  sent = now_ms
end
redis.call('XADD', K.control, 'MAXLEN', '~', opts.control_cap, '*', 'kind', 'click-stop',
           'chat', ARGV[1], 'fence', fence, 'task', ARGV[4], 'why', ARGV[3], 'sent_ms', str(sent))
return {'stopping', fence}
