"""A Python judge that waits 1 ms on I/O per row (a sleep, as an HTTP call waits), at
`concurrency=32`: rows per second, over several runs."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import wai


def judge(row: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.001)
    return {"reward": 1.0 if len(row.get("final_text") or "") % 2 else 0.0, "reason": "length parity"}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rows = wai.read([{"task_id": f"t{i % 1000}", "prompt": f"ask {i % 1000}", "final_text": "x" * (i % 7)} for i in range(n)])
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        scored = wai.evaluate(rows, judge, concurrency=32)
        took = time.perf_counter() - start
        assert len(scored.rows) == n
        rates.append(n / took)
        print(f"{n} rows in {took:.2f} s: {n / took:,.0f} rows/s")
    print(f"median {statistics.median(rates):,.0f} rows/s (min {min(rates):,.0f}, max {max(rates):,.0f}), n = {runs}")


if __name__ == "__main__":
    main()
