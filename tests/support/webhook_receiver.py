#!/usr/bin/env python3
"""A webhook receiver for seckill's tests, verifying every request with the `standardwebhooks`
package from PyPI (the Standard Webhooks reference implementation), not with seckill's code.

    webhook_receiver.py --port P --secret whsec_... --out FILE [--status CODE] [--delay-ms N]
                        [--refuse-user U]

Each request is one JSON line in FILE: {"id", "received_ms", "body"} when its signature and
timestamp verify, {"bad": reason} otherwise (answered 400). Verified requests are answered
--status (default 204) after --delay-ms. Prints "listening PORT" once it accepts requests.
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from standardwebhooks.webhooks import Webhook
except ImportError:
    sys.exit("the webhook tests need the standardwebhooks package: "
             "python3 -m pip install standardwebhooks (scripts/test.sh installs it)")

args = argparse.ArgumentParser()
args.add_argument("--port", type=int, required=True)
args.add_argument("--secret", required=True)
args.add_argument("--out", required=True)
args.add_argument("--status", type=int, default=204)
args.add_argument("--delay-ms", type=int, default=0)
args.add_argument("--refuse-user", default=None,
                  help="answer 500 to the events of this user's orders (a poison event)")
opts = args.parse_args()

hook = Webhook(opts.secret)
lock = threading.Lock()
out = open(opts.out, "a", buffering=1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            hook.verify(body, headers)
        except Exception as e:  # any refusal of the reference implementation
            self.record({"bad": f"{type(e).__name__}: {e}", "id": headers.get("webhook-id")})
            self.answer(400)
            return
        if opts.refuse_user is not None:
            order = json.loads(body).get("order") or {}
            if order.get("user_id") == opts.refuse_user:
                self.answer(500)
                return
        if opts.delay_ms:
            time.sleep(opts.delay_ms / 1000)
        self.record({"id": headers["webhook-id"], "received_ms": time.time() * 1000,
                     "body": body.decode()})
        self.answer(opts.status)

    def record(self, line):
        with lock:
            out.write(json.dumps(line) + "\n")

    def answer(self, status):
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
server.daemon_threads = True
print(f"listening {opts.port}", flush=True)
server.serve_forever()
