-- wrk script of scripts/bench.sh: POST claims of distinct users with keep-alive, so wrk can
-- measure the same claim route as `seckill bench` with a lighter generator (no verification).
-- Users are w<run>-<n>: the run number comes after `--` on wrk's command line, so repeated runs
-- against one campaign never reuse a user (which would turn wins into already_claimed).
counter = 0
run = "0"

function init(args)
  run = args[1] or "0"
end

request = function()
  counter = counter + 1
  local body = string.format('{"user_id":"w%s-%d","qty":1}', run, counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end
