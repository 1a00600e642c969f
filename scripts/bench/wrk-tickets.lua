-- wrk script of scripts/bench-room-claims.sh: POST claims of the users in a file of
-- "user ticket" lines (given after `--`), in turn, each with its X-Seckill-Ticket; with a
-- second argument "none", the same users without a ticket (a campaign without a room).
users = {}
tickets = {}
counter = 0
send_ticket = true

function init(args)
  for line in io.lines(args[1]) do
    local u, t = line:match("^(%S+) (%S+)$")
    if u then
      users[#users + 1] = u
      tickets[#tickets + 1] = t
    end
  end
  send_ticket = args[2] ~= "none"
end

request = function()
  counter = counter % #users + 1
  local headers = {["Content-Type"] = "application/json"}
  if send_ticket then
    headers["X-Seckill-Ticket"] = tickets[counter]
  end
  local body = string.format('{"user_id":"%s","qty":1}', users[counter])
  return wrk.format("POST", nil, headers, body)
end
