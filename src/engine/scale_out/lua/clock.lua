-- The clock of the node serving a campaign's slot: the clock claim.lua judges its window by.
-- KEYS[1] {c:<id>}:meta   hash   only routes the call to the campaign's node; not read
-- returns {seconds, microseconds} (Redis's TIME)
return redis.call('TIME')
