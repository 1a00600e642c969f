"""Joins N users to a campaign's waiting room and prints "user ticket" per admitted user.

Used by scripts/bench-room-claims.sh to hand wrk one valid ticket per user. The room admits
far faster than the joins come (100,000 a second), so each user is read again until admitted.
usage: join_room.py URL CAMPAIGN USERS PREFIX
"""
import http.client
import json
import sys
import threading
import time
from urllib.parse import urlparse

url, campaign, n, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
host = urlparse(url)
out, lock = [], threading.Lock()


def worker(first, step):
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
    for i in range(first, n, step):
        user = f"{prefix}{i}"
        body = json.dumps({"user_id": user})
        path, method = f"/v1/campaigns/{campaign}/queue", "POST"
        for _ in range(100):
            conn.request(method, path, body if method == "POST" else None,
                         {"content-type": "application/json"})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            if resp.status == 200 and answer.get("state") == "admitted":
                with lock:
                    out.append(f"{user} {answer['ticket']}")
                break
            path, method = f"/v1/campaigns/{campaign}/queue/{user}", "GET"
            time.sleep(0.01)
        else:
            sys.exit(f"{user} was not admitted: {answer}")


threads = [threading.Thread(target=worker, args=(k, 16)) for k in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if len(out) != n:
    sys.exit(f"only {len(out)} of {n} users were admitted")
print("\n".join(out))
