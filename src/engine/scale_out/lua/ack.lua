-- ack.lua: acknowledges stream entries whose orders the ledger committed and removes them in
-- the same step, so the stream holds exactly the orders not yet in the ledger (its length is
-- the pipeline lag) and never grows with what is done.
--
-- Removing is a trim, not a delete per entry: XDEL costs Redis about 10 µs per id (7.0,
-- measured), more than the claim itself, while XTRIM MINID drops whole stream nodes. Every
-- entry below the floor is done: the group delivers entries in id order, so one below the
-- oldest entry still pending (or, with nothing pending, below the newest id acknowledged here)
-- was delivered and is no longer pending. The acknowledged ids at or above the floor (behind an
-- entry another consumer still holds, or the newest one itself) are deleted one by one.
-- Only ids this call really acknowledged count: an id this group never delivered (a consumer
-- acknowledging what it read from a Redis that has since been replaced: a failover, a restore
-- from a snapshot) says nothing of this stream, and a floor taken from it would trim entries
-- nobody has read yet. Each id is acknowledged on its own to know which ones were.
--
-- A batch entry of claims.lua holds many orders; its id comes as '<id>+<n>' with n the orders
-- it holds beyond one, taken off the campaign's packed count when the entry is acknowledged
-- now (XACK answers 1 only once per entry, so a redelivered entry is never counted twice).
--
-- KEYS[1] {c:<id>}:orders  stream
-- KEYS[2] {c:<id>}:packed  string  orders in the stream beyond one per entry (claims.lua)
-- ARGV[1] consumer group
-- ARGV[2…] entry ids, a batch entry's as '<id>+<n>' (at most a few thousand per call)
-- Returns the number of entries acknowledged.

local done = {}   -- ids acknowledged by this call
local packed = 0
for i = 2, #ARGV do
  local id, n = string.match(ARGV[i], '^([^+]+)%+(%d+)$')
  id = id or ARGV[i]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    done[#done + 1] = id
    if n then packed = packed + tonumber(n) end
  end
end
if packed > 0 then redis.call('DECRBY', KEYS[2], packed) end
if #done == 0 then return 0 end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function below(a, b)  -- id a < id b
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end

local floor = redis.call('XPENDING', KEYS[1], ARGV[1])[2]
if not floor then
  floor = done[1]
  for i = 2, #done do
    if below(floor, done[i]) then floor = done[i] end
  end
end
redis.call('XTRIM', KEYS[1], 'MINID', floor)
local rest = {}
for i = 1, #done do
  if not below(done[i], floor) then rest[#rest + 1] = done[i] end
end
if #rest > 0 then redis.call('XDEL', KEYS[1], unpack(rest)) end
return #done
