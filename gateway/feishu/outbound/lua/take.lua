-- take: one send draws `cost` tokens from every bucket of one quota (an app's per-second
-- and per-minute buckets, or a chat's), all or none. A low-priority draw (streaming
-- updates, reactions) must leave `reserve` (a share of each bucket's capacity) for final
-- replies (a bucket too small for a reserve has none). A negative cost gives tokens back
-- (never past a bucket's capacity, whatever a hold says). A hold (Feishu answered "rate
-- limited" with a reset time) stops every draw until it ends, whatever the tokens say.
-- Cosmetic calls yield to replies: a reply (no reserve) that must wait marks the quota
-- pressed until its wait and PRESS_MS more have passed, and while it is pressed a
-- low-priority draw takes nothing and answers minus the milliseconds the pressure lasts.
-- A step of Redis's clock delays nothing by more than a bucket's or a hold's own period:
-- a refill or hold time ahead of now (the clock stepped back) counts from now, and is
-- written back at once.
-- KEYS: 1 quota (hash: t<i> tokens and ts<i> last refill in server ms per bucket; until,
--       the hold's end in server ms, hold_ms its length and hold_end the end it is the
--       length of: an older version's hold rewrote `until` alone; pressed, the end of the
--       pressure in server ms)
-- ARGV: 1 cost  2 reserve (0..1)  3 ttl_s  4.. rate_per_s, capacity pairs, one per bucket
-- → 0 when taken, else the milliseconds to wait before trying again (negative: a
--   low-priority draw yields to waiting replies for that long)
--!include clock.lua
local PRESS_MS = 1000
local _, now = clock()
local cost, reserve = tonumber(ARGV[1]), tonumber(ARGV[2])
local hold = redis.call('HMGET', KEYS[1], 'until', 'hold_ms', 'hold_end')
local held = tonumber(hold[1] or '0')
local length = math.max(held - now, 0)  -- a hold set without its length (an older version's)
if hold[3] == hold[1] then length = tonumber(hold[2]) or length end
if held > now + length then  -- the clock stepped back past the hold's own length
  held = now + length
  redis.call('HSET', KEYS[1], 'until', str(held), 'hold_end', str(held))
end
if held > now and cost > 0 then return held - now end
local buckets = (#ARGV - 3) / 2
if reserve > 0 and cost > 0 then
  local pressed = tonumber(redis.call('HGET', KEYS[1], 'pressed') or '0')
  local longest = 0  -- no pressure lasts longer than a reply's longest wait and PRESS_MS
  for i = 1, buckets do
    local rate, capacity = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
    if rate > 0 then longest = math.max(longest, math.ceil(capacity * 1000 / rate)) end
  end
  if pressed > now + PRESS_MS + longest then  -- the clock stepped back past it
    redis.call('HDEL', KEYS[1], 'pressed')
  elseif pressed > now then
    return now - pressed
  end
end
local tokens, wait, stepped = {}, 0, false
for i = 1, buckets do
  local rate, capacity = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local state = redis.call('HMGET', KEYS[1], 't' .. i, 'ts' .. i)
  local have, since = tonumber(state[1] or capacity), tonumber(state[2] or now)
  if since > now then stepped = true end
  have = math.min(capacity, have + math.max(0, now - since) * rate / 1000)
  tokens[i] = have
  local need = math.min(capacity, cost + reserve * capacity) - have
  if need > 0 and cost > 0 then wait = math.max(wait, math.ceil(need * 1000 / rate)) end
end
if wait > 0 and not stepped then
  if reserve == 0 and cost > 0 then
    local until_ms = now + wait + PRESS_MS
    if until_ms > tonumber(redis.call('HGET', KEYS[1], 'pressed') or '0') then
      redis.call('HSET', KEYS[1], 'pressed', str(until_ms))
    end
  end
  return wait
end
for i = 1, buckets do
  local left = tokens[i]
  if wait == 0 then left = math.min(tonumber(ARGV[3 + 2 * i]), left - cost) end
  redis.call('HSET', KEYS[1], 't' .. i, left, 'ts' .. i, str(now))
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return wait
