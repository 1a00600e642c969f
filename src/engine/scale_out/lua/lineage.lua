-- lineage.lua: the check that lets a node of a Redis Cluster serve a campaign (lineage.rs).
-- A replica promoted by a failover may have missed the last writes of the master it replaces;
-- it takes a new replication id (master_replid) when promoted, and so does a restarted master.
-- The campaign's 'checked' field names the lineage its gate was last checked on against the
-- ledger; claims.lua, confirm.lua, cancel_hold.lua and expire.lua refuse to act while it names
-- another one. Read first, then mark: the mark names the lineage the read saw, so a failover
-- between the two leaves the campaign unchecked on the new node.
--
-- KEYS[1] {c:<id>}:meta  hash    the campaign (field 'checked')
-- KEYS[2] {c:<id>}:seq   string  highest order number the gate issued
-- KEYS[3] {c:<id>}:held  hash    pending orders of a campaign with holds
-- KEYS[4] {c:<id>}:orders stream  the campaign's order stream
-- ARGV[1] '' to read; otherwise the lineage a read returned, to mark the campaign checked on it
-- ARGV[2] (mark) the ledger's highest order number for the campaign
-- Read returns {lineage, checked ('' = never), seq, the stream's last id ('0-0' = none),
-- pending order ids…}, or {'missing'} when the campaign is not in Redis. The ledger records
-- that the lineages left behind end at that last id (ledger/postgres/lineage.rs). Mark returns 1 if marked, 0 if the node's lineage is no longer
-- ARGV[1], the campaign is gone, or its numbering is behind ARGV[2] (nothing changed then).

local lineage = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[1] == '' then return {'missing'} end
  return 0
end
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[1] == '' then
  local last = '0-0'
  local info = redis.pcall('XINFO', 'STREAM', KEYS[4])
  if type(info) == 'table' and not info.err then
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then last = info[i + 1] end
    end
  end
  local out = {lineage, redis.call('HGET', KEYS[1], 'checked') or '', string.format('%d', seq),
               last}
  for _, id in ipairs(redis.call('HKEYS', KEYS[3])) do out[#out + 1] = id end
  return out
end
if lineage ~= ARGV[1] or seq < tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'checked', lineage)
return 1
