-- fence.lua: fences or unfences a campaign's gate. The pipeline fences a campaign when the
-- ledger holds a different order under an id the gate issued (the gate lost state): claim.lua
-- then refuses claims on it ('fenced', answered 503 "nothing was changed") until the stream is
-- drained and the gate rebuilt from the ledger.
--
-- KEYS[1] {c:<id>}:meta    hash    the campaign (field 'fenced' = 1 while fenced)
-- KEYS[2] {c:<id>}:orders  stream  orders not yet in the ledger
-- ARGV[1] 'fence' | 'drop'
-- 'fence': sets the field if the campaign exists; returns 1 if set, 0 if absent.
-- 'drop':  deletes the campaign's meta (so the next install rebuilds it from the ledger) only
--          if it is fenced and its stream is empty (every order it issued is in the ledger or
--          recorded as failed); returns 1 if dropped, 0 otherwise.

if ARGV[1] == 'fence' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  redis.call('HSET', KEYS[1], 'fenced', '1')
  return 1
end
if not redis.call('HGET', KEYS[1], 'fenced') then return 0 end
if redis.call('XLEN', KEYS[2]) > 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1
