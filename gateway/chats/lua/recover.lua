--!include chat.lua
-- recover: the sweeper looks at a chat whose deadline passed.
-- ARGV: 1 claim_ttl_ms  2 chat_id  3 running_ttl_ms (also the requeue backoff's base)
--       4 requeue_cap_ms  5 queued_ttl_ms
--       6 may_requeue ('1': nothing waits in the broker's turns queue, so a queued turn that
--         was not picked up is not there; '0': a backlog, the turn may still wait in it)
--       7 history_cap  8 history_ttl_ms   (KEYS 10: done, history.lua)
-- A lease or requeue time further ahead than its own TTL (this server's clock stepped back
-- since it was set) is brought back to it, so a step back delays no recovery by more than
-- that TTL.
-- → {'held'} | {'empty'} | {'dispatch', fence, entry} (a new turn) | {'requeue', fence, entry}
--   (publish the same turn again: it was not picked up in time, maybe lost with a worker)
-- Behind a broker backlog a queued turn is never published again (no copies pile up): its
-- lease is kept and it is looked at again after the backoff.
local now_us, now_ms = clock()
local pttl = redis.call('PTTL', K.lease)
local state = redis.call('HGET', K.lease, 'state')
local own_ttl = tonumber(state == 'running' and ARGV[3] or state == 'queued' and ARGV[5]
                         or ARGV[1])
if pttl > own_ttl then
  redis.call('PEXPIRE', K.lease, own_ttl)
  pttl = own_ttl
end
if pttl > 0 then
  local at = tonumber(redis.call('HGET', K.lease, 'requeue_at_ms') or '')
  if at and at > now_ms + math.max(tonumber(ARGV[3]), tonumber(ARGV[4])) then
    at = now_ms + tonumber(ARGV[3])
    redis.call('HSET', K.lease, 'requeue_at_ms', str(at))
  end
  if at and state == 'queued' then
    local outcome = {'held'}
    if now_ms >= at then
      if ARGV[6] == '1' then
        local n = redis.call('HINCRBY', K.lease, 'requeues', 1)
        at = now_ms + math.min(tonumber(ARGV[3]) * 2 ^ n, tonumber(ARGV[4]))
        outcome = {'requeue', redis.call('HGET', K.lease, 'fence'),
                   redis.call('HGET', K.lease, 'entry')}
      else
        at = now_ms + tonumber(ARGV[3])
      end
      redis.call('HSET', K.lease, 'requeue_at_ms', str(at))
      redis.call('PEXPIRE', K.lease, ARGV[5])  -- a long backlog slows it, never resets it
      pttl = tonumber(ARGV[5])
    end
    redis.call('ZADD', K.index, str(math.min(at, now_ms + pttl)), ARGV[2])
    return outcome
  end
  redis.call('ZADD', K.index, str(now_ms + pttl), ARGV[2])
  return {'held'}
end
-- The lease is gone: its holder died, or a stopped turn's lease ran out (then `claim` drops
-- its message: the flag outlives the lease).
local c = claim(ARGV[2], now_us, now_ms, tonumber(ARGV[1]), false, nil,
                {KEYS[10], ARGV[7], ARGV[8]})
if not c then return {'empty'} end
return {'dispatch', c[1], c[2]}
