-- restock.lua: adds units (and their codes) that the ledger already committed. Guarded by the
-- total the caller read from the ledger before its change, so a restock applies exactly once
-- even when two instances restock at once or one catches up after another died.
--
-- KEYS[1] {c:<id>}:meta   hash
-- KEYS[2] {c:<id>}:codes  list  code pool; new codes go to its tail
-- ARGV[1] total before this restock (must equal the gate's total)
-- ARGV[2] units added
-- ARGV[3…] the codes added, in hand-out order (code campaigns)
-- Returns {'ok', total} | {'stale', gate total} | {'missing', ''}.

local m = redis.call('HMGET', KEYS[1], 'total', 'remaining')
if not m[1] then return {'missing', ''} end
if tonumber(m[1]) ~= tonumber(ARGV[1]) then return {'stale', m[1]} end
local units = tonumber(ARGV[2])
local total = string.format('%d', tonumber(m[1]) + units)
-- The codes first: a script error is not rolled back, so the write that can fail on a damaged
-- pool key comes before the total, which then never counts codes the pool lacks.
local i = 3
while i <= #ARGV do
  local j = math.min(#ARGV, i + 999)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('HSET', KEYS[1], 'total', total,
           'remaining', string.format('%d', tonumber(m[2]) + units))
return {'ok', total}
