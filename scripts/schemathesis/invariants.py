"""Checks every invariant over everything a schemathesis run left behind.

Usage: invariants.py BASE_URL ADMIN_TOKEN DATA_DIR

Reads every campaign and order from the server's SQLite ledger (read-only, while the server
runs) and each campaign's view through the API, and checks: units held by active orders
<= total; the view's remaining == total - units held (engine and ledger agree); no user holds
more than per_user_limit; no code is held by two active orders and every held code is one of
the campaign's codes; order numbers are unique per campaign. Exits 1 on any violation.
"""

import json
import sqlite3
import sys
import urllib.request
from collections import Counter, defaultdict


def main():
    base, token, data = sys.argv[1:4]
    db = sqlite3.connect(f"file:{data}/seckill.db?mode=ro", uri=True)
    campaigns = db.execute("SELECT id, kind, total, per_user_limit FROM campaigns").fetchall()
    orders = db.execute(
        "SELECT order_id, campaign_id, seq, user_id, qty, codes, state FROM orders"
    ).fetchall()
    codes_of = defaultdict(set)
    for cid, code in db.execute("SELECT campaign_id, code FROM campaign_codes"):
        codes_of[cid].add(code)
    violations = []
    held = Counter()
    per_user = Counter()
    code_holders = defaultdict(list)
    seqs = Counter()
    for order_id, cid, seq, user, qty, codes, state in orders:
        seqs[(cid, seq)] += 1
        if state != "active":
            continue
        held[cid] += qty
        per_user[(cid, user)] += qty
        for code in json.loads(codes) if codes else []:
            code_holders[(cid, code)].append(order_id)
            if code not in codes_of[cid]:
                violations.append(f"{order_id} holds {code!r}, not a code of {cid}")
    for (cid, code), holders in code_holders.items():
        if len(holders) > 1:
            violations.append(f"code {code!r} of {cid} held by {holders}")
    for (cid, seq), n in seqs.items():
        if n > 1:
            violations.append(f"order number {seq} of {cid} used {n} times")
    limits = {cid: limit for cid, _, _, limit in campaigns}
    for (cid, user), units in per_user.items():
        if units > limits[cid]:
            violations.append(f"user {user!r} holds {units} > {limits[cid]} of {cid}")
    for cid, kind, total, _ in campaigns:
        if held[cid] > total:
            violations.append(f"{cid}: {held[cid]} units held > total {total}")
        req = urllib.request.Request(
            f"{base}/v1/campaigns/{cid}", headers={"authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            view = json.load(resp)
        if view["total"] != total or view["remaining"] != total - held[cid]:
            violations.append(
                f"{cid}: view total={view['total']} remaining={view['remaining']}, "
                f"ledger total={total} held={held[cid]}"
            )
    active = sum(1 for o in orders if o[6] == "active")
    print(
        f"invariants: {len(campaigns)} campaigns, {len(orders)} orders "
        f"({active} active), {len(violations)} violations"
    )
    for v in violations:
        print("  VIOLATION:", v)
    sys.exit(1 if violations else 0)


if __name__ == "__main__":
    main()
