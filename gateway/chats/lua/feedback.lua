-- feedback: a reaction on one of the bot's answers, recorded on the turn it answered (the
-- chat's reactions hash, beside its history and as long-lived). Events may be taken in any
-- order: each (turn, emoji, person) keeps the newest of its added and removed.
-- KEYS: 1 reactions (hash: '<turn message id>|<emoji>|<open_id>' -> '<at_ms>:1' added,
--       '<at_ms>:0' taken back)
-- ARGV: 1 field  2 at_ms  3 '1' added | '0' taken back  4 ttl_ms  5 cap (fields)
-- → 'recorded' | 'older' (a newer reaction of that person is recorded) | 'full'
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old and tonumber(string.match(old, '^(%d+):')) > tonumber(ARGV[2]) then return 'older' end
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
  local all = redis.call('HGETALL', KEYS[1])  -- full: the reactions taken back go first
  for i = 1, #all, 2 do
    if string.sub(all[i + 1], -2) == ':0' then redis.call('HDEL', KEYS[1], all[i]) end
  end
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then return 'full' end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 'recorded'
