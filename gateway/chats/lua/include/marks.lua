-- Dedupe marks (keys.py ChatKeys.marks): a chat's marks are hashes, one per day of its
-- messages' create_time (Feishu's clock: the same in every delivery of a message), with a
-- field per message (its packed id, keys.py mark_field): '1' admitted, 'withdrawn' (a
-- tombstone: withdraw.lua), 'edited' (an edit came before the message: revise.lua). A day's
-- hash expires dedupe_ttl_s after its day ends, or after its last mark when that is later;
-- a message without a create time has a hash of its own.

-- Keep the marks of `key` until `expire_at` (unix s, the end of their day plus
-- dedupe_ttl_s; 0 for a message without a create time), and at least `ttl_s` after `now_s`
-- (a message of an earlier day arriving now: every mark lasts dedupe_ttl_s after its
-- message came), at most a day more than that (a create time in the future).
local function keep_marks(key, expire_at, ttl_s, now_s)
  local at = math.max(tonumber(expire_at) or 0, now_s + ttl_s)
  redis.call('EXPIREAT', key, str(math.min(at, now_s + ttl_s + 86400)))
end

-- Mark `field` of `key` with `value` (kept as keep_marks keeps it).
local function set_mark(key, field, value, expire_at, ttl_s, now_s)
  redis.call('HSET', key, field, value)
  keep_marks(key, expire_at, ttl_s, now_s)
end
