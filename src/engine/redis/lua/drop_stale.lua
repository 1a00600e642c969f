-- drop_stale.lua: removes a campaign's gate state when its numbering is behind the ledger's
-- (Redis came back from an older snapshot, or a replica that missed writes took over), so the
-- next install rebuilds it from the ledger. Guarded on the numbering in the same atomic step:
-- a gate another instance already rebuilt (and may be serving from, numbering at or past the
-- ledger) is never dropped.
--
-- KEYS[1] {c:<id>}:meta  hash    the campaign (deleted when stale)
-- KEYS[2] {c:<id>}:seq   string  highest order number the gate issued
-- ARGV[1] highest order number the ledger holds for the campaign
-- Returns 1 if dropped, 0 if the gate is level with or ahead of the ledger (or absent).

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
if seq >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
