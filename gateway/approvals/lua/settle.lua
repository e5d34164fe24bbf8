-- settle: the asking turn gives up on a pending request (its time ran out, or it stopped).
-- KEYS: 1 ask:<id>  2 asking
-- ARGV: 1 id  2 state ('expired' | 'stopped')
-- → {state, by, via}: what the request ended as (a decision that came first wins)
local r = redis.call('HMGET', KEYS[1], 'state', 'by', 'via')
if r[1] == 'pending' then
  redis.call('HSET', KEYS[1], 'state', ARGV[2])
  r = {ARGV[2], '', ''}
end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return {r[1] or ARGV[2], r[2] or '', r[3] or ''}
