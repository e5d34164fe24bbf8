--!include clock.lua
-- decide: a person's decision on a pending request (a card click or /approve, /deny), once
-- per token; remembers "always" (per chat) and "session" (per session generation), both for
-- the request's requester (see ask.lua).
-- KEYS: 1 ask:<id>  2 asking  3 allow  4 click:<token> (string, the token's dedupe)
-- ARGV: 1 id  2 decision  3 by (open_id)  4 via ('card' | 'text')  5 token_ttl_s
--       6 remember_s (TTL of the allow hash)
-- → {'decided'} | {'duplicate', state, by} | {'already', state, by} | {'expired'}
--   | {'unknown'}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local r = redis.call('HMGET', KEYS[1], 'state', 'by', 'expires_ms', 'key', 'gen', 'requester')
if not redis.call('SET', KEYS[4], ARGV[1], 'NX', 'EX', ARGV[5]) then
  return {'duplicate', r[1] or '', r[2] or ''}
end
if r[1] ~= 'pending' then return {'already', r[1] or '', r[2] or ''} end
local _, now_ms = clock()
local function unpoint()
  if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
end
if now_ms > tonumber(r[3]) then
  redis.call('HSET', KEYS[1], 'state', 'expired')
  unpoint()
  return {'expired'}
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'by', ARGV[3], 'via', ARGV[4])
unpoint()
local field = nil
local who = (r[6] or '') .. ':' .. r[4]
if ARGV[2] == 'always' then field = 'a:' .. who end
if ARGV[2] == 'session' then field = 's:' .. r[5] .. ':' .. who end
if field then
  redis.call('HSET', KEYS[3], field, '1')
  redis.call('EXPIRE', KEYS[3], ARGV[6])
end
return {'decided'}
