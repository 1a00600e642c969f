-- ack.lua: acknowledges stream entries whose orders the ledger committed and deletes them in
-- the same step, so the stream holds exactly the orders not yet in the ledger (its length is
-- the pipeline lag) and never grows with what is done.
--
-- KEYS[1] {c:<id>}:orders  stream
-- ARGV[1] consumer group
-- ARGV[2…] entry ids (at most a few thousand per call)
-- Returns the number of entries acknowledged.

local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
return acked
