--!include chat.lua
-- purge: an operator drops a chat's waiting messages (`feishu-gateway purge`): the entries
-- given (the ones the operator was shown), except the one the chat's turn holds, so the
-- turn ends as it would have and nothing is left pointing at a missing message. A turn
-- whose worker died holds its message after its lease ran out too (the pinned head), until
-- the sweeper runs it again.
-- KEYS: chat.lua's.  ARGV: 1 chat_id, then the entries to drop
-- → {dropped, kept} (kept: 1 when the held entry was among them and stayed)
local held = redis.call('HGET', K.lease, 'entry') or redis.call('HGET', K.tries, 'head')
local dropped, kept = 0, 0
for i = 2, #ARGV do
  if ARGV[i] == held then
    kept = 1
  else
    dropped = dropped + redis.call('ZREM', K.inbox, ARGV[i])
  end
end
if not held and redis.call('ZCARD', K.inbox) == 0 then redis.call('ZREM', K.index, ARGV[1]) end
return {dropped, kept}
