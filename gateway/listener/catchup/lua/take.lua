-- take: the one listener that works an app's catch-up job holds its lease (a listener that
-- died leaves it to run out; another one then goes on from the progress the job keeps).
-- KEYS: 1 lease (string: the holder)  2 job (hash: gen since_ms until_ms planned_ms (when
--       planned, server ms); chats (the planned chats, JSON, '' until the holder planned
--       them); next (the index of the chat being read), token (its next page's token),
--       pages (its pages read so far))
-- ARGV: 1 owner  2 lease_ms
-- → {} (no job) | {'busy'} (another holder) | {'job', gen, since_ms, until_ms, chats, next,
--   token, pages, clock ('feishu' | 'redis': what since/until are on), planned_ms (Redis's
--   clock when the gap was found)}
if redis.call('EXISTS', KEYS[2]) == 0 then return {} end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {'busy'} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
local job = redis.call('HMGET', KEYS[2], 'gen', 'since_ms', 'until_ms', 'chats', 'next',
                       'token', 'pages', 'clock', 'planned_ms')
return {'job', job[1] or '0', job[2] or '0', job[3] or '0', job[4] or '', job[5] or '0',
        job[6] or '', job[7] or '0', job[8] or 'redis', job[9] or '0'}
