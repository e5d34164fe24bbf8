--!include drop.lua
-- evict: the bot was removed from the chat. Every waiting message is dropped (recorded as
-- 'removed'), a turn not started is released, a running one is stopped as /stop stops one
-- (drop.lua); nothing of the chat is run or sent any more. The chat's `left` mark keeps
-- the time of the removal (GATEWAY_DEDUPE_TTL_S): a message sent before it that arrives
-- late is not admitted (one sent after it means the bot is back). Running it again
-- changes nothing more.
-- KEYS: chat.lua's, then 10 left  11 done (history.lua)
-- ARGV: 1 chat_id  2 the removal's time (ms, Feishu's clock; '0' unknown)
--       3 options (JSON): dedupe_ttl_s claim_ttl_ms control_cap history_cap history_ttl_ms
--         flag_ttl_ms stop_hold_ms
-- → {dropped, 'stopping' | 'idle' | 'none'} (none: no turn held the chat)
local opts = cjson.decode(ARGV[3])
local now_us, now_ms = clock()
local at = tonumber(ARGV[2]) or 0
if at <= 0 then at = now_ms end
at = math.max(at, tonumber(redis.call('GET', KEYS[10]) or '0') or 0)
redis.call('SET', KEYS[10], str(at), 'EX', opts.dedupe_ttl_s)
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'entry')
local dropped = 0
for _, e in ipairs(redis.call('ZRANGE', K.inbox, 0, -1)) do
  if not running(e) then
    redis.call('ZREM', K.inbox, e)
    remember(KEYS[11], e, 'removed', '', lease[1] or '', redis.call('HGET', K.tries, 'n'),
             opts.history_cap, opts.history_ttl_ms, now_ms)
    dropped = dropped + 1
  end
end
if lease[2] == 'running' then
  return {dropped, stop_running(ARGV[1], 'removed', opts)[1]}
end
claim(ARGV[1], now_us, now_ms, opts.claim_ttl_ms, true)  -- nothing waits: the chat goes idle
if lease[1] then return {dropped, 'idle'} end
return {dropped, 'none'}
