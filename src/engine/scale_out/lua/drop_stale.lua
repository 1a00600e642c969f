-- drop_stale.lua: takes a campaign whose gate is behind the ledger out of service (Redis came
-- back from an older snapshot, or a replica that missed writes took over), so that it is
-- rebuilt from the ledger. Guarded in the same atomic step: a gate another instance already
-- rebuilt (and may be serving from, numbering at or past the ledger) is left alone.
--
-- A gate that went back in time may still hold, in its stream, orders the ledger does not have
-- yet (a consumer read them and died before writing them, and the snapshot kept them). A
-- rebuild from the ledger alone would give their units and codes to other buyers and let
-- their buyers win again; so such a campaign is fenced instead (claims answer 503 "nothing was
-- changed"), and the pipeline rebuilds it once its stream is drained into the ledger
-- (fence.lua 'drop', the path of a reissued order id). Only a campaign with an empty stream is
-- dropped for an immediate rebuild.
--
-- KEYS[1] {c:<id>}:meta    hash    the campaign (deleted, or field 'fenced' set)
-- KEYS[2] {c:<id>}:seq     string  highest order number the gate issued
-- KEYS[3] {c:<id>}:orders  stream  orders not yet in the ledger
-- KEYS[4] {c:<id>}:held    hash    pending orders of a campaign with holds
-- ARGV[1] highest order number the ledger holds for the campaign
-- ARGV[2] '1' to take the campaign out of service even when its numbering is level, because
--         the ledger holds resolved the pending orders ARGV[3…] — if the gate still holds one
--         of them pending now (one the gate resolved since it was read is no reason)
-- Returns 1 if dropped, 2 if fenced, 0 if the gate is level with or ahead of the ledger (or
-- absent).

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[2] == '1' then
  local still = false
  for i = 3, #ARGV do
    if redis.call('HEXISTS', KEYS[4], ARGV[i]) == 1 then still = true; break end
  end
  if not still then return 0 end
elseif seq >= tonumber(ARGV[1]) then
  return 0
end
if redis.call('XLEN', KEYS[3]) > 0 then
  redis.call('HSET', KEYS[1], 'fenced', '1')
  return 2
end
redis.call('DEL', KEYS[1])
return 1
