-- history: a chat's finished turns, newest first, for `feishu-gateway chat` and `retry`.
-- The list (KEYS of the caller: `done`) holds JSON arrays, at most `cap` of them, and expires
-- `ttl_ms` after the last turn ended:
--   [message_id, outcome, at_ms, fence, attempts(, task(, entry))]
-- task: null when it is the turn's own id (`turn:<chat>:<message_id>:<fence>`, derived by the
-- reader), '' when not known. entry: the stored message, kept only for a turn that can be
-- retried (failed, stopped, gave-up), so a busy chat's answered turns cost a short line each.
-- (Records of older versions were objects {mid, outcome, at_ms, task, fence, attempts,
-- entry}: readers take both.)
local RETRYABLE = {failed = true, stopped = true, ['gave-up'] = true}

local function remember(key, entry, outcome, task_id, fence, attempts, cap, ttl_ms, now_ms)
  cap = tonumber(cap) or 0
  if not entry or outcome == '' or cap <= 0 then return end
  local a = string.find(entry, '|', 1, true)
  local b = string.find(entry, '|', a + 1, true)
  local mid = string.sub(entry, a + 1, b - 1)
  fence = fence or ''
  local record = {mid, outcome, now_ms, fence, tonumber(attempts) or 0}
  local own = ':' .. mid .. ':' .. fence
  task_id = task_id or ''
  if fence == '' or string.sub(task_id, -#own) ~= own then record[6] = task_id end
  if RETRYABLE[outcome] then
    record[6] = record[6] or cjson.null
    record[7] = string.sub(entry, b + 1)
  end
  if redis.call('LPUSH', key, cjson.encode(record)) > cap then
    redis.call('LTRIM', key, 0, cap - 1)
  end
  redis.call('PEXPIRE', key, ttl_ms)
end

-- (message_id, outcome, fence, entry or nil) of a record of either layout.
local function record_fields(record)
  if record.mid then return record.mid, record.outcome, record.fence, record.entry end
  local entry = record[7]
  if type(entry) ~= 'string' then entry = nil end
  return record[1], record[2], record[4], entry
end
