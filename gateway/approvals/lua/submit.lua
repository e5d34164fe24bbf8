--!include clock.lua
-- submit: a person's submit of a pending form (its values already checked against its
-- fields by the listener), once per token.
-- KEYS: 1 ask:<id>  2 asking  3 click:<token> (string, the token's dedupe)
-- ARGV: 1 id  2 values (JSON)  3 by (open_id)  4 token_ttl_s
-- → {'submitted'} | {'duplicate', state, by} | {'already', state, by} | {'expired'}
--   | {'unknown'}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local r = redis.call('HMGET', KEYS[1], 'state', 'by', 'expires_ms')
if not redis.call('SET', KEYS[3], ARGV[1], 'NX', 'EX', ARGV[4]) then
  return {'duplicate', r[1] or '', r[2] or ''}
end
if r[1] ~= 'pending' then return {'already', r[1] or '', r[2] or ''} end
local function unpoint()
  if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
end
local _, now_ms = clock()
if now_ms > tonumber(r[3]) then
  redis.call('HSET', KEYS[1], 'state', 'expired')
  unpoint()
  return {'expired'}
end
redis.call('HSET', KEYS[1], 'state', 'submitted', 'by', ARGV[3], 'via', 'card',
           'values', ARGV[2])
unpoint()
return {'submitted'}
