--!include clock.lua
-- beat: a listener whose long connection of one app is up says so, every few seconds and
-- at once when it (re)connects; a beat after a gap longer than after_ms (no listener of the
-- app was connected: Feishu pushed nothing, and gave up redelivering) plans a catch-up.
-- The gap is the time since the last beat of ANY listener of the app, on Feishu's clock
-- when the beating listener knows it (from Feishu's answers: ARGV[4]) and the last beat
-- noted it too: the clock the messages' create_time is on, which no step of Redis's clock
-- moves, so an outage during which Redis's clock steps back is still a gap, and the job's
-- window needs no conversion. Else on Redis's clock (a first beat with Feishu's clock
-- unknown), where a step back is no gap and a step forward by S looks like a gap of S.
-- KEYS: 1 up (string: the server ms of the app's last beat)  2 job (hash, see take.lua)
--       3 upf (string: Feishu's clock, in ms, at the app's last beat that knew it)
-- ARGV: 1 after_ms  2 window_ms  3 margin_ms  4 feishu_ms (Feishu's clock now; '' unknown)
-- The job reads back [since, until] on its `clock` ('feishu' or 'redis'): from the last
-- beat before the gap (less the margin; no earlier than window_ms ago) to now plus the
-- margin. With no beat remembered (a first start, an upgrade, Redis's data lost with its
-- dedupe marks) nothing is planned: there is no gap known, and reading the whole window
-- would answer again what was answered. The beat is kept a week (UP_TTL_MS), so a gap
-- longer than the window reads the window. A gap while a job is pending widens it and
-- starts it over (`gen` + 1: its holder's progress no longer counts; the messages read
-- again are duplicates); a pending job on the other clock is carried over to this one
-- (shifted by the difference of the two clocks now, and widened by the margin).
-- → {pending ('1' | '0'), gap_ms ('' when nothing was planned now; '-1': no beat known)}
local UP_TTL_MS = 7 * 24 * 3600 * 1000
local DATE_RESOLUTION_MS = 1000
local _, now = clock()
local after, window, margin = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local feishu = tonumber(ARGV[4] or '')
local last = tonumber(redis.call('GET', KEYS[1]) or '')
local lastf = tonumber(redis.call('GET', KEYS[3]) or '')
local since, gap, on, here = false, '', 'redis', now
if feishu and lastf then
  on, here = 'feishu', feishu
  -- (each listener reads Feishu's clock to the second of a Date header: up to 1 s off)
  if feishu - lastf > after + DATE_RESOLUTION_MS then
    since, gap = lastf - margin, str(feishu - lastf)
  end
elseif not last then
  gap = '-1'
elseif now - last > after then
  since, gap = last - margin, str(now - last)
end
if since then
  local job = redis.call('HMGET', KEYS[2], 'since_ms', 'until_ms', 'gen', 'clock')
  local until_ms = here + margin
  local was = job[4] or 'redis'
  if job[1] and (was == on or feishu) then
    local shift = 0
    if was ~= on then  -- (Feishu's clock and Redis's differ by feishu - now)
      shift = (on == 'feishu') and (feishu - now) or (now - feishu)
    end
    since = math.min(since, tonumber(job[1]) + shift - (shift ~= 0 and margin or 0))
    until_ms = math.max(until_ms, tonumber(job[2]) + shift + (shift ~= 0 and margin or 0))
  end
  if not job[1] or was == on or feishu then
    since = math.max(since, here - window)
    redis.call('HSET', KEYS[2], 'since_ms', str(since), 'until_ms', str(until_ms),
               'gen', str(tonumber(job[3] or '0') + 1), 'chats', '', 'next', '0', 'token', '',
               'pages', '0', 'planned_ms', str(now), 'clock', on)
    redis.call('PEXPIRE', KEYS[2], window)
  else
    gap = ''  -- (a job on Feishu's clock, and this beat knows none: that job stands)
  end
end
redis.call('SET', KEYS[1], str(now), 'PX', math.max(window, UP_TTL_MS))
if feishu then  -- (a beat that knew no Feishu clock leaves none: the next gap is Redis's)
  redis.call('SET', KEYS[3], str(feishu), 'PX', math.max(window, UP_TTL_MS))
else
  redis.call('DEL', KEYS[3])
end
return {tostring(redis.call('EXISTS', KEYS[2])), gap}
