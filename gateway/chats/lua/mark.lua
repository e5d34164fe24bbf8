--!include clock.lua
-- mark: a worker process starts a turn of `session` (an agent cache's key: a conversation of
-- the chat and its generation, see FEISHU_SESSION_SCOPE). The mark moves to that process and
-- the one it replaces is returned: a process whose cached agent did not run the session's
-- previous turn knows that agent missed it. The hash expires `ran_ttl_ms` after the chat's
-- last mark; past `cap` marks the oldest go, down to half of it (the new one stays). A
-- session without a mark has its agent rebuilt: slower, never wrong.
-- KEYS: 1 runners (hash: session -> '<server ms> <runner id>', when and by whom its last
--       turn was started)
-- ARGV: 1 session  2 runner  3 ran_ttl_ms  4 cap
-- → the runner of the session's previous turn ('' when none is remembered)
local session, cap = ARGV[1], tonumber(ARGV[4])

local function forget_oldest()
  local all = redis.call('HGETALL', KEYS[1])
  local others = {}
  for i = 1, #all, 2 do
    if all[i] ~= session then
      others[#others + 1] = {all[i], tonumber(string.match(all[i + 1], '^%d+')) or 0}
    end
  end
  table.sort(others, function(a, b) return a[2] < b[2] end)
  for i = 1, #others - math.floor(cap / 2) do redis.call('HDEL', KEYS[1], others[i][1]) end
end

local _, now_ms = clock()
local previous = redis.call('HGET', KEYS[1], session)
redis.call('HSET', KEYS[1], session, str(now_ms) .. ' ' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('HLEN', KEYS[1]) > cap then forget_oldest() end
return previous and string.match(previous, '^%d+ (.+)$') or ''
