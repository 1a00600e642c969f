-- wrk script of scripts/bench.sh: POST claims of distinct users with keep-alive, so wrk can
-- measure the same claim route as `seckill bench` with a lighter generator (no verification).
-- Each wrk thread numbers its users from its own random offset.
counter = 0
offset = 0

function setup(thread)
  thread:set("offset", math.random(1, 1000000) * 1000000)
end

request = function()
  counter = counter + 1
  local body = string.format('{"user_id":"w%d","qty":1}', offset + counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end
