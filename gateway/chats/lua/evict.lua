--!include drop.lua
-- evict: the bot was removed from the chat at `at` (Feishu's clock). Every waiting message
-- created up to then is dropped (recorded as 'removed'), a turn not started of one of them is
-- released, a running one of one of them is stopped as /stop stops one (drop.lua); nothing
-- of it is run or sent any more. A message created after the removal (the bot was added back
-- and spoken to: this is a removal delivered again) is kept, and so is its turn. The chat's
-- `left` mark keeps the time of the removal (GATEWAY_DEDUPE_TTL_S): a message sent before it
-- that arrives late is not admitted (one sent after it means the bot is back). Running it
-- again changes nothing more.
-- KEYS: chat.lua's, then 9 left  10 done (history.lua)
-- ARGV: 1 chat_id  2 the removal's time (ms, Feishu's clock; '0' unknown: now)
--       3 options (JSON): dedupe_ttl_s claim_ttl_ms queued_ttl_ms control_cap history_cap history_ttl_ms
--         flag_ttl_ms stop_hold_ms
-- → {dropped, 'stopping' | 'idle' | 'none'} (none: no turn of a message before the removal
--   held the chat) | {dropped, 'claimed', fence, entry} (what was sent after the removal
--   gets a turn, to be published)
local opts = cjson.decode(ARGV[3])
local now_us, now_ms = clock()
local at = tonumber(ARGV[2]) or 0
if at <= 0 then at = now_ms end
redis.call('SET', KEYS[9], str(math.max(at, tonumber(redis.call('GET', KEYS[9]) or '0') or 0)),
           'EX', opts.dedupe_ttl_s)
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'entry')
local dropped = 0
for _, e in ipairs(redis.call('ZRANGEBYSCORE', K.inbox, '-inf', str(at))) do
  if not running(e) then
    redis.call('ZREM', K.inbox, e)
    remember(KEYS[10], e, 'removed', '', lease[1] or '', redis.call('HGET', K.tries, 'n'),
             opts.history_cap, opts.history_ttl_ms, now_ms)
    dropped = dropped + 1
  end
end
local before = lease[3] and tonumber(redis.call('ZSCORE', K.inbox, lease[3]) or '')
if lease[2] == 'running' then
  if before and before <= at then return {dropped, stop_running(ARGV[1], 'removed', opts)[1]} end
  return {dropped, 'none'}  -- (a turn of a message sent since: it goes on)
end
if not lease[1] or before then return {dropped, 'none'} end  -- (its message is still there)
local c = claim(ARGV[1], now_us, now_ms, opts.claim_ttl_ms, true, nil, nil, nil,
                opts.queued_ttl_ms)
if c then return {dropped, 'claimed', c[1], c[2]} end
return {dropped, 'idle'}
