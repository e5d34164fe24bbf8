-- history: a chat's finished turns, newest first, for `feishu-gateway chat` and `retry`.
-- The list (KEYS of the caller: `done`) holds JSON records {mid, outcome, at_ms, fence,
-- attempts[, task][, entry]} (task: only when it is not the turn's own id), at most `cap` of them, and expires `ttl_ms` after the last turn ended.
-- Only a turn that can be retried (failed, stopped, gave-up) keeps its stored entry, so a
-- busy chat's answered turns cost a short line each.
local RETRYABLE = {failed = true, stopped = true, ['gave-up'] = true}

local function remember(key, entry, outcome, task_id, fence, attempts, cap, ttl_ms, now_ms)
  cap = tonumber(cap) or 0
  if not entry or outcome == '' or cap <= 0 then return end
  local a = string.find(entry, '|', 1, true)
  local b = string.find(entry, '|', a + 1, true)
  local mid = string.sub(entry, a + 1, b - 1)
  local record = {mid = mid, outcome = outcome, at_ms = now_ms, fence = fence or '',
                  attempts = tonumber(attempts) or 0}
  -- the task id is left out when it is the turn's own (`turn:<chat>:<mid>:<fence>`): the
  -- reader derives it, and a busy chat's records stay short
  local own = ':' .. mid .. ':' .. (fence or '')
  task_id = task_id or ''
  if fence == nil or fence == '' or string.sub(task_id, -#own) ~= own then
    record.task = task_id
  end
  if RETRYABLE[outcome] then record.entry = string.sub(entry, b + 1) end
  if redis.call('LPUSH', key, cjson.encode(record)) > cap then
    redis.call('LTRIM', key, 0, cap - 1)
  end
  redis.call('PEXPIRE', key, ttl_ms)
end
