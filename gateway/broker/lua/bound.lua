-- bound: the low-priority queue within its bounds after a publish (low_queue.py says why).
-- KEYS[1]: the release queue's list (newest first: kombu publishes with LPUSH, consumers
-- BRPOP the oldest); ARGV: (unused), the cap (messages), the deadline header, the list's
-- expiry (ms; only ever lengthened, so a producer with a longer `expires_s` keeps its tasks).
-- Returns how many tasks it dropped. The tasks carry no priority, so they all sit in the
-- queue's own list.
local t = redis.call('TIME')
local queue, cap = KEYS[1], tonumber(ARGV[2])
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dropped = math.max(0, redis.call('LLEN', queue) - cap)
if dropped > 0 then
  redis.call('LTRIM', queue, 0, cap - 1)
end
while true do
  local oldest = redis.call('LINDEX', queue, -1)
  if not oldest then break end
  local ok, message = pcall(cjson.decode, oldest)
  local by = ok and type(message) == 'table' and type(message.headers) == 'table'
    and tonumber(message.headers[ARGV[3]])
  if not by or by > now then break end
  redis.call('RPOP', queue)
  dropped = dropped + 1
end
local ttl = redis.call('PTTL', queue)
if ttl ~= -2 and ttl < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', queue, ARGV[4])
end
return dropped
