--!include chat.lua
-- handback: a worker that is shutting down gives back the turn whose reply it could not
-- send (its answer is kept), or whose agent it asked to stop: the chat is claimed again at
-- once under a new fence, for the caller to publish, instead of waiting for the lease to
-- run out and a sweep. The re-run resends the kept answer under the same uuids (or runs
-- the agent again). The attempt counts as handed back, not as a failed one (`handed`:
-- GATEWAY_MAX_ATTEMPTS counts the others). A turn asked to stop meanwhile is dropped here,
-- as when its lease runs out (claim).
-- KEYS: chat.lua's, then 9 done (history.lua)
-- ARGV: 1 fence  2 claim_ttl_ms  3 chat_id  4 history_cap  5 history_ttl_ms
--       6 queued_ttl_ms
-- → {'stale'} (the turn no longer holds the chat: nothing touched) | {'empty'}
--   | {'claimed', fence, entry} (the turn again, to be published)
if redis.call('HGET', K.lease, 'fence') ~= ARGV[1] then return {'stale'} end
local now_us, now_ms = clock()
redis.call('HINCRBY', K.tries, 'handed', 1)
local c = claim(ARGV[3], now_us, now_ms, tonumber(ARGV[2]), false, nil,
                {KEYS[9], ARGV[4], ARGV[5]}, nil, tonumber(ARGV[6]))
if not c then return {'empty'} end
return {'claimed', c[1], c[2]}
