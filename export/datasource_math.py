"""Offset arithmetic of the streaming reader (plain Python, testable without Spark)."""

from __future__ import annotations


def cap_rows(start: dict, end: dict, max_rows: int) -> dict:
    """Spread ``max_rows`` over the queues in proportion to what each has waiting, at least one
    message for every queue that has any (no queue starves)."""
    waiting = {(t, b, q): stop - start.get(t, {}).get(b, {}).get(q, stop)
               for t, brokers in end.items() for b, queues in brokers.items()
               for q, stop in queues.items()}
    total = sum(w for w in waiting.values() if w > 0)
    if total <= max_rows:
        return end
    capped = {t: {b: dict(q) for b, q in brokers.items()} for t, brokers in end.items()}
    for (t, b, q), w in waiting.items():
        if w > 0:
            share = max(1, w * max_rows // total)
            capped[t][b][q] = start.get(t, {}).get(b, {}).get(q, 0) + min(w, share)
    return capped
