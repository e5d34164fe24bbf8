-- hold: Feishu answered "rate limited": no draw from this quota until `hold_ms` from now
-- (a later end already set is kept, unless it lies further ahead than its own length: the
-- clock stepped back since it was set).
-- KEYS: 1 quota (hash, see take.lua)
-- ARGV: 1 hold_ms  2 ttl_s
-- → the end of the hold, server ms
--!include clock.lua
local _, now = clock()
local hold_ms = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'until', 'hold_ms', 'hold_end')
local held = tonumber(state[1] or '0')
local length = math.max(held - now, 0)  -- a hold set without its length (an older version's)
if state[3] == state[1] then length = tonumber(state[2]) or length end
if held > now + length then held = 0 end
if held >= now + hold_ms then
  hold_ms = math.max(length, hold_ms)
else
  held = now + hold_ms
end
redis.call('HSET', KEYS[1], 'until', str(held), 'hold_ms', str(hold_ms), 'hold_end', str(held))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return held
