-- refuse: admission refused a person's direct message: tell them at most once per `every_s`
-- (a 'refused' control job for the desk); nothing else of the chat is touched, nothing is
-- queued, no lease is taken.
-- KEYS: 1 told (string, the chat's: its user was told, expires after every_s)  2 control
-- ARGV: 1 every_s  2 chat_id  3 message json  4 control stream cap  5 reason
-- → 1 when a notice was recorded, 0 when the user was told recently
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'kind', 'refused', 'chat', ARGV[2],
           'message', ARGV[3], 'reason', ARGV[5])
return 1
