--!include chat.lua
--!include history.lua
-- retry: an operator re-runs the message of a turn that ended badly (`feishu-gateway retry`).
-- It enters the chat's inbox at the back, behind what waits now, and runs in its turn like
-- any message; it is never run around the chat's lease.
-- KEYS: chat.lua's, then 9 done (history.lua)
-- ARGV: 1 message_id  2 chat_id  3 the fence of the record the json was made from
--       4 the message json to store (its retry count raised)
--       5 options (JSON): claim_ttl_ms queued_ttl_ms inbox_cap history_cap history_ttl_ms
-- → {'unknown'} (no turn of it in the history: never seen, or older than its retention)
--   | {'answered', outcome} | {'changed'} (a newer record of it came meanwhile: read again)
--   | {'waiting'} (it waits or runs already) | {'full', waiting}
--   | {'queued', waiting} | {'claimed', waiting, fence, entry} (its turn, to be published)
local found, outcome, fence, stored = false, nil, nil, nil
for _, raw in ipairs(redis.call('LRANGE', KEYS[9], 0, -1)) do
  local ok, record = pcall(cjson.decode, raw)
  if ok and type(record) == 'table' then
    local mid
    mid, outcome, fence, stored = record_fields(record)
    if mid == ARGV[1] then
      found = true
      break
    end
  end
end
if not found then return {'unknown'} end
if not stored then return {'answered', outcome or ''} end
if fence ~= ARGV[3] then return {'changed'} end
local opts = cjson.decode(ARGV[5])
local entries = redis.call('ZRANGE', K.inbox, 0, -1)
for _, e in ipairs(entries) do
  if entry_id(e) == ARGV[1] then return {'waiting'} end
end
local waiting = #entries
if waiting >= opts.inbox_cap then return {'full', waiting} end
local now_us, now_ms = clock()
-- behind the last waiting message even when Feishu's clock (its scores) runs ahead of ours
local score = now_ms
local last = redis.call('ZRANGE', K.inbox, -1, -1, 'WITHSCORES')
if last[2] then score = math.max(score, tonumber(last[2]) + 1) end
redis.call('ZADD', K.inbox, str(score), string.format('%016.0f|%s|%s', now_us, ARGV[1], ARGV[4]))
if redis.call('EXISTS', K.lease) == 1 then return {'queued', waiting} end
local c = claim(ARGV[2], now_us, now_ms, opts.claim_ttl_ms, false, nil,
                {KEYS[9], opts.history_cap, opts.history_ttl_ms}, nil, opts.queued_ttl_ms)
return {'claimed', waiting, c[1], c[2]}
