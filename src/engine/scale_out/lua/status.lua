-- status.lua: pause, resume or close, atomically with respect to claims: a claim script that
-- runs after this one sees the new status, so no claim wins after a pause or close answered.
--
-- KEYS[1] {c:<id>}:meta  hash
-- ARGV[1] new status ('active' | 'paused' | 'closed')
-- ARGV[2] 'force' to skip the transition rule (used only to undo a change the ledger refused)
-- Returns {'ok', previous} | {'conflict', previous} (closed is final) | {'missing', ''}.

local current = redis.call('HGET', KEYS[1], 'status')
if not current then return {'missing', ''} end
if current == 'closed' and ARGV[1] ~= 'closed' and ARGV[2] ~= 'force' then
  return {'conflict', current}
end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
return {'ok', current}
