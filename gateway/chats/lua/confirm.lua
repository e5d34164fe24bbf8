--!include chat.lua
-- confirm: the claimed turn was published; it waits in the broker for a worker now.
-- ARGV: 1 fence  2 task_id  3 queued_ttl_ms  4 requeue_after_ms  5 chat_id   → 1 | 0
-- If it is not picked up by `requeue_at_ms` (lost with a worker that took it and died, or a
-- publish the broker lost), the sweeper publishes it again under the same fence.
local lease = redis.call('HMGET', K.lease, 'fence', 'state')
if lease[1] ~= ARGV[1] or lease[2] ~= 'claimed' then return 0 end
local _, now_ms = clock()
local requeue_at = now_ms + tonumber(ARGV[4])
redis.call('HSET', K.lease, 'state', 'queued', 'task_id', ARGV[2], 'requeue_at_ms',
           str(requeue_at), 'requeues', '0')
redis.call('PEXPIRE', K.lease, ARGV[3])
redis.call('ZADD', K.index, str(requeue_at), ARGV[5])
return 1
