"""Schemathesis hooks of scripts/schemathesis.sh.

An acquire may wait up to `wait_ms` (<= 60,000) for another holder, and a read of the event
feed up to `wait_ms` (<= 30,000) for an event, as documented; a run that waited that long on
every generated request would spend its budget sleeping. Valid waits above 500 ms are
shortened, in a lock's body and in the feed's query (values outside the documented range are
left alone, so the server's refusals of them are still tested).
"""

import schemathesis


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    body = case.body
    if isinstance(body, dict):
        wait = body.get("wait_ms")
        if isinstance(wait, int) and not isinstance(wait, bool) and 500 < wait <= 60_000:
            body["wait_ms"] = wait % 500
    query = case.query
    if isinstance(query, dict):
        wait = query.get("wait_ms")
        if isinstance(wait, int) and not isinstance(wait, bool) and 500 < wait <= 30_000:
            query["wait_ms"] = wait % 500
