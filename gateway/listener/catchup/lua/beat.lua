--!include clock.lua
-- beat: a listener whose long connection of one app is up says so, every few seconds and
-- at once when it (re)connects; a beat after a gap longer than after_ms (no listener of the
-- app was connected: Feishu pushed nothing, and gave up redelivering) plans a catch-up.
-- All on Redis's clock: the gap is the time since the last beat of ANY listener of the app.
-- KEYS: 1 up (string: the server ms of the app's last beat)  2 job (hash, see take.lua)
-- ARGV: 1 after_ms  2 window_ms  3 margin_ms
-- The job reads back [since, until]: from the last beat before the gap (less the margin; no
-- earlier than window_ms ago) to now plus the margin. With no beat remembered (a first
-- start, an upgrade, Redis's data lost with its dedupe marks) nothing is planned: there is
-- no gap known, and reading the whole window would answer again what was answered. The
-- beat is kept a week (UP_TTL_MS), so a gap longer than the window reads the window. A gap while a job is pending widens
-- it and starts it over (`gen` + 1: its holder's progress no longer counts; the messages
-- read again are duplicates).
-- A step of Redis's clock back is no gap; a step forward by S looks like a gap of S (a
-- catch-up that finds nothing new).
-- → {pending ('1' | '0'), gap_ms ('' when nothing was planned now; '-1': no beat known)}
local UP_TTL_MS = 7 * 24 * 3600 * 1000
local _, now = clock()
local after, window, margin = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local last = tonumber(redis.call('GET', KEYS[1]) or '')
local since, gap = false, ''
if not last then
  gap = '-1'
elseif now - last > after then
  since, gap = last - margin, str(now - last)
end
if since then
  local job = redis.call('HMGET', KEYS[2], 'since_ms', 'until_ms', 'gen')
  local until_ms = now + margin
  if job[1] then since = math.min(since, tonumber(job[1])) end
  if job[2] then until_ms = math.max(until_ms, tonumber(job[2])) end
  since = math.max(since, now - window)
  redis.call('HSET', KEYS[2], 'since_ms', str(since), 'until_ms', str(until_ms),
             'gen', str(tonumber(job[3] or '0') + 1), 'chats', '', 'next', '0', 'token', '',
             'pages', '0', 'planned_ms', str(now))
  redis.call('PEXPIRE', KEYS[2], window)
end
redis.call('SET', KEYS[1], str(now), 'PX', math.max(window, UP_TTL_MS))
return {tostring(redis.call('EXISTS', KEYS[2])), gap}
