-- take: one send draws `cost` tokens from every bucket of one quota (an app's per-second
-- and per-minute buckets, or a chat's), all or none. A low-priority draw (streaming
-- updates, reactions) must leave `reserve` (a share of each bucket's capacity) for final
-- replies (a bucket too small for a reserve has none). A hold (Feishu answered "rate limited" with a reset time) stops every draw until
-- it ends, whatever the tokens say.
-- KEYS: 1 quota (hash: t<i> tokens and ts<i> last refill in server ms per bucket, until ms)
-- ARGV: 1 cost  2 reserve (0..1)  3 ttl_s  4.. rate_per_s, capacity pairs, one per bucket
-- → 0 when taken, else the milliseconds to wait before trying again
--!include clock.lua
local _, now = clock()
local cost, reserve = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if held > now then return held - now end
local tokens, wait = {}, 0
local buckets = (#ARGV - 3) / 2
for i = 1, buckets do
  local rate, capacity = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local state = redis.call('HMGET', KEYS[1], 't' .. i, 'ts' .. i)
  local have, since = tonumber(state[1] or capacity), tonumber(state[2] or now)
  have = math.min(capacity, have + math.max(0, now - since) * rate / 1000)
  tokens[i] = have
  local need = math.min(capacity, cost + reserve * capacity) - have
  if need > 0 then wait = math.max(wait, math.ceil(need * 1000 / rate)) end
end
if wait > 0 then return wait end
for i = 1, buckets do
  redis.call('HSET', KEYS[1], 't' .. i, tokens[i] - cost, 'ts' .. i, str(now))
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 0
