--!include chat.lua
-- start: a worker begins the turn of `fence`, if it still holds the chat and nobody started it.
-- KEYS: chat.lua's
-- ARGV: 1 fence  2 chat_id  3 task_id  4 worker
--       5 options (JSON): running_ttl_ms max_attempts session_ttl_ms merge_window_ms
--         legacy_before_ms mixed (gateway/chats/upgrade.py)
-- → {'stale'} | {'wait', ms} (busy mode merge or interrupt: come back in ms, nothing
--   changed)
--   | {'run' | 'poison', entry, generation, attempt, answer_kind, answer_chunks, batch}
-- The order is fixed here, not at the claim: on its first attempt the turn runs the chat's
-- oldest waiting message, which is not the claimed one when an older message arrived late
-- (refused during a blip, redelivered) between the claim and now. A message that already
-- started once keeps its place.
-- Busy mode merge or interrupt (tries `busy`, written by ingest): a first attempt waits
-- until the chat's newest waiting message is merge_window_ms old (at most 4 windows after
-- the oldest one arrived), then takes every waiting message as one turn: the batch, fixed
-- here, so a re-run answers the same messages and what arrives meanwhile waits for the next
-- turn. A message the bot starts (its id `send_…`, gateway/chats/outbound.py) is never
-- merged: it goes out alone, and a batch ends before it.
local lease = redis.call('HMGET', K.lease, 'fence', 'state', 'entry', 'busy')
if lease[1] ~= ARGV[1] or lease[2] == 'running' then return {'stale'} end
local entry = lease[3]
if not entry then return {'stale'} end
local oldest = redis.call('ZRANGE', K.inbox, 0, 0)[1]
if oldest ~= entry and not redis.call('ZSCORE', K.inbox, entry) then return {'stale'} end
local now_us, now_ms = clock()
local opts = cjson.decode(ARGV[5])
local merge = merging(lease_busy(lease[4], opts.mixed))
local tries = redis.call('HMGET', K.tries, 'n', 'batch', 'handed')
local first = tonumber(tries[1] or '0') == 0
local batch = nil
local function own(e) return string.sub(entry_id(e), 1, 5) == 'send_' end
if merge and first and oldest and own(oldest) then merge = false end
if merge and first then
  batch = {}
  for _, e in ipairs(redis.call('ZRANGE', K.inbox, 0, -1)) do
    if own(e) then break end
    batch[#batch + 1] = e
  end
  local window = tonumber(opts.merge_window_ms) * 1000
  local newest, earliest = 0, nil
  for _, e in ipairs(batch) do
    local arrival = tonumber(string.sub(e, 1, string.find(e, '|', 1, true) - 1)) or 0
    newest = math.max(newest, arrival)
    earliest = math.min(earliest or arrival, arrival)
  end
  local not_before = math.min(newest + window, (earliest or 0) + 4 * window)
  if now_us < not_before then
    local left = math.ceil((not_before - now_us) / 1000)
    local until_ms = now_ms + left + opts.running_ttl_ms
    if redis.call('PTTL', K.lease) < left + opts.running_ttl_ms then  -- outlive the wait
      redis.call('PEXPIRE', K.lease, left + opts.running_ttl_ms)
      redis.call('ZADD', K.index, 'GT', str(until_ms), ARGV[2])
    end
    local at = tonumber(redis.call('HGET', K.lease, 'requeue_at_ms') or '')
    if at and at < until_ms then  -- a worker has it: no sweeper publishes it again meanwhile
      redis.call('HSET', K.lease, 'requeue_at_ms', str(until_ms))
      redis.call('ZADD', K.index, 'GT', str(until_ms), ARGV[2])
    end
    return {'wait', str(left)}
  end
end
local attempt = redis.call('HINCRBY', K.tries, 'n', 1)
if attempt == 1 and oldest ~= entry then
  entry = oldest
  redis.call('HSET', K.tries, 'head', entry)
end
local fixed = tries[2] or ''
if batch and #batch > 1 and batch[1] == entry then
  fixed = cjson.encode(batch)
  redis.call('HSET', K.tries, 'batch', fixed)
end
redis.call('HSET', K.lease, 'state', 'running', 'task_id', ARGV[3], 'worker', ARGV[4],
           'since_ms', str(now_ms), 'entry', entry, 'message_id', entry_id(entry))
redis.call('PEXPIRE', K.lease, opts.running_ttl_ms)
redis.call('ZADD', K.index, str(now_ms + opts.running_ttl_ms), ARGV[2])
return begin(entry, opts.max_attempts, opts.session_ttl_ms, attempt, fixed, tries[3])
