-- hold: Feishu answered "rate limited": no draw from this quota until `hold_ms` from now
-- (a later end already set is kept).
-- KEYS: 1 quota (hash, see take.lua)
-- ARGV: 1 hold_ms  2 ttl_s
-- → the end of the hold, server ms
--!include clock.lua
local _, now = clock()
local ends = math.max(tonumber(redis.call('HGET', KEYS[1], 'until') or '0'),
                      now + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'until', str(ends))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return ends
