#!/usr/bin/env python3
"""Fills a seckill SQLite ledger with one sold-out stock campaign: N orders of one unit to N
distinct buyers (u1 … uN), as `seckill bench --scenario hot` would leave it, with the counts
the ledger keeps beside them (`campaigns.live_units`, one `holdings` row per buyer).

The file must already carry seckill's schema (start `seckill serve --data DIR` on it once), so
the rows are exactly those the server writes. The rows are generated inside SQLite by one
recursive INSERT … SELECT, so 10 M orders take about a minute, not an hour of HTTP claims.

Usage: recovery_ledger.py DB ORDERS [CAMPAIGN_ID [STATUS]]   (STATUS: active, paused, closed)
"""
import sqlite3
import sys
import time


def main():
    db, n = sys.argv[1], int(sys.argv[2])
    campaign = sys.argv[3] if len(sys.argv) > 3 else "sale"
    status = sys.argv[4] if len(sys.argv) > 4 else "active"
    now = int(time.time() * 1_000_000)
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -262144")  # 256 MiB: the indexes are built in place
    with con:
        con.execute(
            "INSERT INTO campaigns (id, kind, total, per_user_limit, status, created_at, live_units) "
            "VALUES (?, 'stock', ?, 1, ?, ?, ?)",
            (campaign, n, status, now, n),
        )
        con.execute(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
            "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at) "
            "SELECT ?2 || '-' || i, ?2, i, 'u' || i, 1, NULL, 'active', ?3 + i FROM s",
            (n, campaign, now),
        )
        con.execute(
            "INSERT INTO holdings (campaign_id, user_id, units, cap) "
            "SELECT campaign_id, user_id, 1, 1 FROM orders WHERE campaign_id = ?",
            (campaign,),
        )
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


if __name__ == "__main__":
    main()
