--!include clock.lua
-- due: chats whose sweeper deadline passed, by the server's clock.
-- KEYS: 1 index (gw:chats)   ARGV: 1 limit   → chat ids
local _, now_ms = clock()
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', str(now_ms), 'LIMIT', 0, ARGV[1])
