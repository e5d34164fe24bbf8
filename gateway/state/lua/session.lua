--!include chat.lua
-- session: /new starts a new conversation: a generation never used before, even after the key
-- expired (it is derived from the server's clock). ARGV: 1 session_ttl_ms   → generation
local _, now_ms = clock()
local g = str(math.max(tonumber(redis.call('GET', K.gen) or '0') + 1, now_ms))
redis.call('SET', K.gen, g, 'PX', ARGV[1])
return g
