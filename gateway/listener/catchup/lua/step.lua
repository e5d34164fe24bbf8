-- step: the holder of an app's catch-up lease records its progress (`save`, which also
-- extends the lease), ends the job (`done`) or lets the lease go (`release`). Only while
-- it still holds the lease and the job is the one it took (the same `gen`: a new gap
-- starts the job over).
-- KEYS: 1 lease  2 job (take.lua)
-- ARGV: 1 owner  2 lease_ms  3 gen  4 'save' | 'done' | 'release'  5.. field, value pairs
--       of the job to write (save)
-- → 1 when done, 0 when the lease or the job is no longer this holder's
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[4] == 'release' then
  redis.call('DEL', KEYS[1])
  return 1
end
if redis.call('HGET', KEYS[2], 'gen') ~= ARGV[3] then return 0 end
if ARGV[4] == 'done' then
  redis.call('DEL', KEYS[2], KEYS[1])
  return 1
end
if #ARGV > 4 then redis.call('HSET', KEYS[2], unpack(ARGV, 5)) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
