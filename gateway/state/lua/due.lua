--!include clock.lua
-- due: take up to `limit` chats whose sweeper deadline passed (by the server's clock) and
-- hide them from every other sweeper for `claim_ms`, so sweepers split the due chats between
-- them instead of all working on the same ones (recover.lua then sets each one's next
-- deadline; a sweeper that dies holding some leaves them due again after `claim_ms`).
-- KEYS: 1 index (gw:chats)   ARGV: 1 limit  2 claim_ms   → chat ids
local _, now_ms = clock()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', str(now_ms), 'LIMIT', 0, ARGV[1])
if #due > 0 then
  local args, later = {}, str(now_ms + tonumber(ARGV[2]))
  for i, chat in ipairs(due) do
    args[2 * i - 1] = later
    args[2 * i] = chat
  end
  redis.call('ZADD', KEYS[1], 'XX', unpack(args))
end
return due
