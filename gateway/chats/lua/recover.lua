--!include chat.lua
-- recover: the sweeper looks at a chat whose deadline passed.
-- KEYS: chat.lua's, then 9 done (history.lua)
-- ARGV: 1 chat_id
--       2 may_requeue ('1': nothing waits in the broker's turns queue, so a queued turn that
--         was not picked up is not there; '0': a backlog, the turn may still wait in it)
--       3 options (JSON): claim_ttl_ms running_ttl_ms (also the requeue backoff's base)
--         requeue_cap_ms queued_ttl_ms history_cap history_ttl_ms stop_hold_ms
-- A lease or requeue time further ahead than its own TTL (this server's clock stepped back
-- since it was set) is brought back to it, so a step back delays no recovery by more than
-- that TTL (a stopping turn's own TTL is stop_hold_ms).
-- → {'held'} | {'empty'} | {'claimed', fence, entry} (a new turn) | {'requeue', fence, entry}
--   (publish the same turn again: it was not picked up in time, maybe lost with a worker)
-- Behind a broker backlog a queued turn is published again once, at its first deadline (the
-- claim TTL: nothing confirms its claimer's publish, which may have been lost with its
-- process or refused by the broker), then never more (no copies pile up): its lease is kept
-- and it is looked at again after the backoff.
local now_us, now_ms = clock()
local opts = cjson.decode(ARGV[3])
local running_ttl, queued_ttl = opts.running_ttl_ms, opts.queued_ttl_ms
local pttl = redis.call('PTTL', K.lease)
local lease = redis.call('HMGET', K.lease, 'state', 'stopping', 'requeues')
local state = lease[1]
local own_ttl = state == 'running' and running_ttl or state == 'queued' and queued_ttl
                or opts.claim_ttl_ms
if state == 'running' and lease[2] == '1' then  -- held for its canceller (hold_for_canceller)
  own_ttl = math.max(own_ttl, opts.stop_hold_ms)
end
if pttl > own_ttl then
  redis.call('PEXPIRE', K.lease, own_ttl)
  pttl = own_ttl
end
if pttl > 0 then
  local at = tonumber(redis.call('HGET', K.lease, 'requeue_at_ms') or '')
  if at and at > now_ms + math.max(running_ttl, opts.requeue_cap_ms) then
    at = now_ms + running_ttl
    redis.call('HSET', K.lease, 'requeue_at_ms', str(at))
  end
  if at and state == 'queued' then
    local outcome = {'held'}
    if now_ms >= at then
      -- (the first time even behind a backlog: the claimer's publish may have been lost)
      if ARGV[2] == '1' or (lease[3] or '0') == '0' then
        local n = redis.call('HINCRBY', K.lease, 'requeues', 1)
        at = now_ms + math.min(running_ttl * 2 ^ n, opts.requeue_cap_ms)
        outcome = {'requeue', redis.call('HGET', K.lease, 'fence'),
                   redis.call('HGET', K.lease, 'entry')}
      else
        at = now_ms + running_ttl
      end
      redis.call('HSET', K.lease, 'requeue_at_ms', str(at))
      redis.call('PEXPIRE', K.lease, queued_ttl)  -- a long backlog slows it, never resets it
      pttl = queued_ttl
    end
    redis.call('ZADD', K.index, str(math.min(at, now_ms + pttl)), ARGV[1])
    return outcome
  end
  redis.call('ZADD', K.index, str(now_ms + pttl), ARGV[1])
  return {'held'}
end
-- The lease is gone: its holder died, or a stopped turn's lease ran out (then `claim` drops
-- its message: the flag outlives the lease).
local c = claim(ARGV[1], now_us, now_ms, opts.claim_ttl_ms, false, nil,
                {KEYS[9], opts.history_cap, opts.history_ttl_ms}, nil, queued_ttl)
if not c then return {'empty'} end
return {'claimed', c[1], c[2]}
