#!/usr/bin/env python3
"""Slow bodies against a running seckill, with genuine buyers beside the attack.

Attackers bound to 127.0.0.2 … 127.0.0.(1+ADDRESSES) keep opening connections that send a
complete claim head with `Content-Length: 20` and no body (PER_ROUND new ones per address
every 500 ms). After WARMUP seconds of that, BUYERS genuine claims are sent from 127.0.0.1 in rounds
of 20 (each on its own connection) and their status and latency recorded. Each attacking
connection is kept 6 s, then replaced. Prints one line:
heads sent, buyers answered 200 / 503 / other, median and slowest answer.

Usage: attack_slow_bodies.py URL CAMPAIGN ADDRESSES [PER_ROUND] [BUYERS] [WARMUP_SECS]
(the server must hold loopback peers to its per-address limits: --share-loopback, since every
address here is a loopback one.)
"""
import asyncio
import json
import statistics
import sys
import time
from urllib.parse import urlparse


async def attacker(host, port, src, per_round, stop, sent):
    held = []
    while not stop.is_set():
        for _ in range(per_round):
            try:
                r, w = await asyncio.wait_for(
                    asyncio.open_connection(host, port, local_addr=(src, 0)), 0.2)
            except Exception:
                continue
            w.write(HEAD)
            sent[0] += 1
            held.append(w)
        # Each head is kept open 6 s (the old order held a place up to the 10 s request
        # timeout), then replaced: the attack holds a steady 12 rounds' worth.
        if len(held) > 12 * per_round:
            for w in held[: len(held) - 12 * per_round]:
                w.close()
            del held[: len(held) - 12 * per_round]
        await asyncio.sleep(0.5)
    for w in held:
        w.close()


async def buyer(host, port, path, user):
    body = json.dumps({"user_id": user}).encode()
    start = time.monotonic()
    try:
        r, w = await asyncio.open_connection(host, port, local_addr=("127.0.0.1", 0))
        w.write(b"POST %s HTTP/1.1\r\nHost: seckill\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
        line = await asyncio.wait_for(r.readline(), 30)
        w.close()
        status = int(line.split()[1])
    except Exception:
        status = 0
    return status, time.monotonic() - start


async def main():
    url, campaign, addresses = sys.argv[1], sys.argv[2], int(sys.argv[3])
    per_round = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    buyers = int(sys.argv[5]) if len(sys.argv) > 5 else 200
    global WARMUP
    WARMUP = float(sys.argv[6]) if len(sys.argv) > 6 else 3.0
    u = urlparse(url)
    global HEAD
    path = f"/v1/campaigns/{campaign}/claims"
    HEAD = (f"POST {path} HTTP/1.1\r\nHost: seckill\r\nContent-Type: application/json\r\n"
            f"Content-Length: 20\r\n\r\n").encode()
    stop, sent = asyncio.Event(), [0]
    tasks = [asyncio.create_task(attacker(u.hostname, u.port, f"127.0.0.{2 + i}", per_round, stop, sent))
             for i in range(addresses)]
    await asyncio.sleep(WARMUP)
    results = []
    for rnd in range(buyers // 20):
        results += await asyncio.gather(*[
            buyer(u.hostname, u.port, path, f"buyer-{addresses}-{rnd}-{i}-{time.time_ns()}")
            for i in range(20)])
    stop.set()
    await asyncio.gather(*tasks)
    ok = sum(1 for s, _ in results if s == 200)
    shed = sum(1 for s, _ in results if s == 503)
    times = [t for _, t in results]
    print(f"{addresses:>2} address(es): {sent[0]:>6} heads sent; buyers 200: {ok}, 503: {shed}, "
          f"other: {len(results) - ok - shed}; median {statistics.median(times) * 1000:.1f} ms, "
          f"slowest {max(times) * 1000:.1f} ms")


HEAD = b""
WARMUP = 3.0
asyncio.run(main())
