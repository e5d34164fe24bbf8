--!include clock.lua
-- ask: a turn asks its n-th question. The request id is the turn's (chat, message, n), so a
-- turn run again after its worker died asks the same id: the request it finds is returned
-- as it is ('again': its card, its decision if one was made meanwhile, the time left of
-- the timeout counted from the first ask, never more than the timeout). A request of that
-- id with another question (key or prompt; the asker puts the question in the id, so only
-- a caller that does not) is asked anew on the same card ('reopened'). Otherwise a new
-- request is
-- opened, unless its requester already allowed its key in this chat ("always") or in this
-- session ("session"). Per requester: in a group, one member's "always" never answers
-- another member's request.
-- KEYS: 1 ask:<id> (hash: state key prompt requester chat_type message_id chat_id app_id
--       expires_ms gen; later by via card)  2 asking (string: the chat's pending request id)
--       3 allow (hash: 'a:<requester>:<key>' always, 's:<gen>:<requester>:<key>' this
--       session)  4 gen (the chat's session generation, chat.lua's KEYS[6])
-- ARGV: 1 id  2 key  3 prompt  4 timeout_ms
--       5 the asking turn (JSON): requester chat_type message_id app_id chat_id
--         keep_s (how long the request is remembered)
-- → {'remembered', 'always'|'session'}
--   | {'asked'|'reopened'|'again', state, left_ms, by, via, card}
local _, now_ms = clock()
local r = redis.call('HMGET', KEYS[1], 'key', 'prompt', 'state', 'expires_ms', 'by', 'via',
                     'card')
if r[1] == ARGV[2] and r[2] == ARGV[3] then
  local left = math.min(tonumber(r[4]) - now_ms, tonumber(ARGV[4]))  -- (not past a step back)
  if r[3] == 'pending' and left > 0 then redis.call('SET', KEYS[2], ARGV[1], 'PX', left) end
  return {'again', r[3], str(left), r[5] or '', r[6] or '', r[7] or ''}
end
local turn = cjson.decode(ARGV[5])
local gen = redis.call('GET', KEYS[4]) or '0'
local who = turn.requester .. ':' .. ARGV[2]
if redis.call('HEXISTS', KEYS[3], 'a:' .. who) == 1 then return {'remembered', 'always'} end
if redis.call('HEXISTS', KEYS[3], 's:' .. gen .. ':' .. who) == 1 then
  return {'remembered', 'session'}
end
local expires = str(now_ms + tonumber(ARGV[4]))
redis.call('HDEL', KEYS[1], 'by', 'via')
redis.call('HSET', KEYS[1], 'state', 'pending', 'key', ARGV[2], 'prompt', ARGV[3],
           'requester', turn.requester, 'chat_type', turn.chat_type,
           'message_id', turn.message_id, 'expires_ms', expires, 'gen', gen,
           'app_id', turn.app_id, 'chat_id', turn.chat_id)
redis.call('EXPIRE', KEYS[1], turn.keep_s)
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
return {r[1] and 'reopened' or 'asked', 'pending', ARGV[4], '', '', r[7] or ''}
