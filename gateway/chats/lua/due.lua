--!include clock.lua
-- due: take up to `limit` chats whose sweeper deadline passed (by the server's clock) and
-- hide them from every other sweeper for `claim_ms`, so sweepers split the due chats between
-- them instead of all working on the same ones (recover.lua then sets each one's next
-- deadline; a sweeper that dies holding some leaves them due again after `claim_ms`).
-- A step back of the server's clock would leave every deadline set before it that much
-- further away: the last time seen here is kept beside the index, and when the clock is
-- found behind it, every later deadline is moved back by the step (once, for the whole
-- index), so a step delays no recovery by more than its own period.
-- KEYS: 1 index (gw:chats)  2 the index's clock (the last server ms seen here)
-- ARGV: 1 limit  2 claim_ms   → chat ids
local STEP_MS, SEEN_TTL_S = 1000, 86400
local _, now_ms = clock()
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if seen - now_ms > STEP_MS then
  local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. str(now_ms), '+inf', 'WITHSCORES')
  for i = 1, #later, 2 do
    local moved = math.max(now_ms, tonumber(later[i + 1]) - (seen - now_ms))
    redis.call('ZADD', KEYS[1], 'XX', str(moved), later[i])
  end
end
if now_ms > seen or seen - now_ms > STEP_MS then
  redis.call('SET', KEYS[2], str(now_ms), 'EX', SEEN_TTL_S)
end
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
