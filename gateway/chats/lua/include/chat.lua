--!include clock.lua
--!include history.lua
-- Every per-chat script gets the same KEYS, in this order (gateway/chats/keys.py):
--   1 lease    hash: fence state entry message_id task_id worker since_ms requeue_at_ms requeues
--              busy (a copy of tries' `busy`, '' for none, so the scripts that read the
--              lease know it without reading tries) stopping ('1' once the turn was asked
--              to stop: its flag is in `stop`; '' before) (claim writes every field, so no
--              field of an earlier turn lingers)
--   2 inbox    zset: score = Feishu create_time (ms); member = '<arrival us, 16 digits>|<id>|<json>'
--   3 fence    string: the last fence issued, while the chat is idle (tries has it else)
--   4 tries    hash, while the chat is active: fence (the last fence issued; never goes
--              backwards: max(last + 1, server us)); head (the dispatched entry: it keeps
--              its place, even after a crash), n (turns started for it), aid kind chunks
--              (its answer, kept before it is sent), batch (a merged turn's entries, JSON,
--              fixed by start.lua): fixed fields, overwritten by each claim of a new head;
--              busy (the chat's busy mode, 'merge' or 'interrupt', written by ingest.lua).
--              (A small string for an idle chat's fence costs far less than this hash,
--              which big fields turn into a hashtable for good.)
--   5 stop     hash: at_ms (the chat's last stop, for the debounce); fence entry task why
--              (the flag of a running turn that was asked to stop, and why: stopped,
--              withdrawn, removed); keep ('1': an interrupt stopped it, its messages go
--              into the next turn)
--   6 gen      string: the session generation (/new)
--   7 index    zset gw:chats: chat -> when (server ms) the sweeper should look at it next
--   8 control  stream gw:control: commands and notices for the listeners' control desks
local K = {lease = KEYS[1], inbox = KEYS[2], fence = KEYS[3], tries = KEYS[4], stop = KEYS[5],
           gen = KEYS[6], index = KEYS[7], control = KEYS[8]}
local KEEP_MS = 86400000  -- fence and tries outlive any lease by this much

-- The last fence issued for the chat (0 if none is remembered). `known`: tries' `fence` as
-- the caller read it already (false: tries has none).
local function last_fence(known)
  if known == nil then known = redis.call('HGET', K.tries, 'fence') end
  return tonumber(known or redis.call('GET', K.fence) or '0')
end

-- A message's stored json with the `caught_up` mark (read back after an outage) when
-- `caught` says it had it: an edit's json (gateway/core/model.py Message.to_json, compact,
-- never empty) does not carry it, and the late note must stay.
local function keep_caught_up(json, caught)
  if caught and not string.find(json, '"caught_up":true', 1, true) then
    return '{"caught_up":true,' .. string.sub(json, 2)
  end
  return json
end

local function entry_id(entry)
  local a = string.find(entry, '|', 1, true)
  local b = string.find(entry, '|', a + 1, true)
  return string.sub(entry, a + 1, b - 1)
end

-- The entry of `message_id` in the chat's inbox (false when it waits no more).
local function find_entry(message_id)
  for _, e in ipairs(redis.call('ZRANGE', K.inbox, 0, -1)) do
    if entry_id(e) == message_id then return e end
  end
  return false
end

-- The chat's busy mode ('' for none): `lease_busy` is the lease's copy as the caller read it
-- (false when that lease has none: tries is read).
local function busy_mode(lease_busy)
  if lease_busy then return lease_busy end
  return redis.call('HGET', K.tries, 'busy') or ''
end

-- The busy mode's copy in the lease as the caller read it (`copy`), or false (busy_mode
-- reads tries) while a process of the version before, which writes tries' alone, may run
-- (`mixed`, gateway/chats/upgrade.py).
local function lease_busy(copy, mixed)
  if mixed then return false end
  return copy
end

-- The fields of the stop flag (`stop`) a script needs, read only when the lease says its
-- turn was asked to stop (`stopping`, as the caller read it) or while a process of the
-- version before, which raises the flag without marking the lease, may run (`mixed`);
-- else false each: no stop concerns the lease's turn.
local function stop_fields(stopping, mixed, ...)
  if stopping == '' and not mixed then return {false, false, false} end
  return redis.call('HMGET', K.stop, ...)
end

-- Whether the chat merges what waits into one turn: busy mode merge, or interrupt (which
-- merges too, and stops a running turn when a message comes: ingest.lua).
local function merging(lease_busy)
  local busy = busy_mode(lease_busy)
  return busy == 'merge' or busy == 'interrupt'
end

-- The running turn was just asked to stop: its lease lives at least `hold_ms` more (the
-- cancel timeout and a lease TTL), so its canceller, not the lease's TTL running out first,
-- ends it at the timeout (fencing it, dispatching what waits, terminating it when asked). A
-- lease its heartbeat extended just before the stop may have less left than the timeout.
local function hold_for_canceller(hold_ms)
  local left = redis.call('PTTL', K.lease)
  if left >= 0 and left < hold_ms then redis.call('PEXPIRE', K.lease, hold_ms) end
end

-- Whether the turn of `fence` was stopped by an interrupt (busy mode interrupt): its
-- messages are not dropped, the next turn answers them with the new ones.
local function interrupted(fence)
  return redis.call('HGET', K.stop, 'fence') == fence and redis.call('HGET', K.stop, 'keep') == '1'
end

-- The entries a turn of `head` answers: the merged batch its start fixed (tries `batch`,
-- busy modes merge and interrupt), else the head alone. `batch`: tries' `batch` as the
-- caller read it already.
local function turn_entries(head, batch)
  if batch == nil then batch = redis.call('HGET', K.tries, 'batch') end
  if batch and batch ~= '' then
    local entries = cjson.decode(batch)
    if entries[1] == head then return entries end
  end
  return {head}
end

-- The entries of the turn of `head` (turn_entries) when `entry` is one of them, else false.
local function turn_holding(head, entry)
  if not head then return false end
  local entries = turn_entries(head)
  for _, e in ipairs(entries) do
    if e == entry then return entries end
  end
  return false
end

-- Give the dispatched message (if it is still waiting: its turn crashed) or else the oldest
-- one a fresh lease under a new fence, or end the chat's activity when nothing waits.
-- `done` says the head just finished (complete): then the pin is known stale, not read.
-- The lease is written `queued` under the turn's own task id (keys.py turn_task_id), for
-- the caller to publish: it lives `queued_ttl_ms`, and the sweeper publishes the turn again
-- when no worker started it by `ttl_ms` (the claim TTL: a publish that was lost, with its
-- publisher or the broker, heals then; recover.lua). So a publish needs no second step.
-- `run` ({task_id, worker}) writes the lease as already running (a worker goes straight on
-- with it: complete.lua), with `ttl_ms` the running TTL.
-- `history` ({done key, cap, ttl_ms}, see history.lua): where a stopped turn dropped here
-- is recorded.
-- `known` ({fence, busy, oldest}, each may be nil): tries' `fence` and the chat's busy mode
-- as the caller read them already, and the inbox's oldest entry when the caller knows it
-- (it just added the only one). A fresh head's tries get the busy mode when it is known.
-- Returns {fence, entry, fresh}, or nil when the inbox is empty; `fresh`: a new head (with
-- `run`, its attempt is already counted: 1).
local function claim(chat, now_us, now_ms, ttl_ms, done, run, history, known, queued_ttl_ms)
  known = known or {}
  local fence_read = nil
  local function fence_now()  -- (read once: nothing here changes it before it is written)
    if fence_read == nil then fence_read = last_fence(known.fence) end
    return fence_read
  end
  local first = false
  if not done then
    local pinned = redis.call('HMGET', K.tries, 'head', 'fence')
    if known.fence == nil then known.fence = pinned[2] or false end
    -- a stopped turn whose lease ran out (its worker and its canceller gone): its message
    -- is done, not to be run again (the flag outlives the lease)
    local stopped = redis.call('HGET', K.stop, 'entry')
    local anew = false  -- an interrupted turn: its messages go into a fresh turn
    if stopped and stopped ~= '' then
      local fence = fence_now()
      if interrupted(str(fence)) then
        anew = true
      elseif tonumber(redis.call('HGET', K.stop, 'fence')) == fence then
        local why = redis.call('HGET', K.stop, 'why')
        if not why or why == '' then why = 'stopped' end
        for _, e in ipairs(turn_entries(stopped)) do
          if redis.call('ZREM', K.inbox, e) == 1 and history then
            remember(history[1], e, why, redis.call('HGET', K.stop, 'task') or '',
                     str(fence), redis.call('HGET', K.tries, 'n'), history[2], history[3],
                     now_ms)
          end
        end
      end
    end
    if not anew then first = pinned[1] end
    if first and not redis.call('ZSCORE', K.inbox, first) then first = false end
  end
  local fresh = not first
  if fresh then first = known.oldest or redis.call('ZRANGE', K.inbox, 0, 0)[1] end
  if not first then
    redis.call('SET', K.fence, str(fence_now()), 'PX', KEEP_MS)
    redis.call('DEL', K.lease, K.tries)
    redis.call('ZREM', K.index, chat)
    return nil
  end
  local id = entry_id(first)
  local f = str(math.max(fence_now() + 1, now_us))
  if fresh then
    local fields = {'fence', f, 'head', first, 'n', run and '1' or '0', 'aid', '', 'chunks', '',
                    'batch', '', 'handed', '0'}
    if known.busy then
      fields[#fields + 1] = 'busy'
      fields[#fields + 1] = known.busy
    end
    redis.call('HSET', K.tries, unpack(fields))
  else
    redis.call('HSET', K.tries, 'fence', f)
  end
  redis.call('PEXPIRE', K.tries, KEEP_MS)
  local due = str(now_ms + ttl_ms)
  redis.call('HSET', K.lease, 'fence', f, 'state', run and 'running' or 'queued',
             'since_ms', str(now_ms), 'message_id', id, 'entry', first,
             'task_id', run and run[1] or ('turn:' .. chat .. ':' .. id .. ':' .. f),
             'worker', run and run[2] or '', 'requeue_at_ms', run and '' or due,
             'requeues', '0', 'busy', busy_mode(known.busy), 'stopping', '')
  redis.call('PEXPIRE', K.lease, run and ttl_ms or queued_ttl_ms)
  redis.call('ZADD', K.index, due, chat)
  return {f, first, fresh}
end

-- /new: a session generation never used before, even after the key expired.
local function renew_session(now_ms, session_ttl_ms)
  local g = str(math.max(tonumber(redis.call('GET', K.gen) or '0') + 1, now_ms))
  redis.call('SET', K.gen, g, 'PX', session_ttl_ms)
end

-- The turn of `entry` starts now (its lease says running): read the session generation and
-- any answer an earlier attempt kept. `attempt`: this one's number, already counted.
-- Returns {'run' | 'poison', entry, generation, attempt, answer_kind, answer_chunks, batch}
-- (batch: the JSON list of the merged entries, oldest first, or false: the entry alone).
-- `batch`, `handed`: tries' `batch` and `handed` as the caller knows them (nil: read here).
local function begin(entry, max_attempts, session_ttl_ms, attempt, batch, handed)
  local gen = redis.call('GET', K.gen) or '0'
  if gen ~= '0' then redis.call('PEXPIRE', K.gen, session_ttl_ms) end
  local kind, chunks = false, false
  if attempt > 1 then  -- only an earlier attempt of this message can have kept an answer
    local kept = redis.call('HMGET', K.tries, 'aid', 'kind', 'chunks')
    if kept[1] == entry_id(entry) then kind, chunks = kept[2], kept[3] end
  end
  local outcome = 'run'
  -- (an attempt handed back by a worker that was leaving is no failed attempt)
  if handed == nil then handed = redis.call('HGET', K.tries, 'handed') end
  handed = tonumber(handed or '0') or 0
  if attempt - handed > tonumber(max_attempts) then outcome = 'poison' end
  if batch == nil then batch = redis.call('HGET', K.tries, 'batch') end
  if batch == '' then batch = false end
  return {outcome, entry, gen, attempt, kind, chunks, batch}
end
