"""`wai.pass_at` on rows held in memory (a polars.DataFrame, a pyarrow.Table) against the same
rows from their Parquet path, in one process, in turn: medians and the ratio pair by pair."""

from __future__ import annotations

import statistics
import sys
import time

import polars as pl
import pyarrow.parquet as pq

import wai


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    path = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    frame = pl.read_parquet(path)
    table = pq.read_table(path)
    print(f"{path}: {frame.height} rows; polars {frame.estimated_size() / 1e9:.2f} GB in memory")
    wai.pass_at(path)  # warm-up: page cache, allocator
    cases = {
        "path": lambda: wai.pass_at(path),
        "polars.DataFrame": lambda: wai.pass_at(frame),
        "pyarrow.Table": lambda: wai.pass_at(table),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            times[name].append(timed(fn))
    base = times["path"]
    for name, got in times.items():
        ratios = [a / b for a, b in zip(got, base)]
        print(f"{name:18} median {statistics.median(got):6.2f} s (min {min(got):.2f}, max {max(got):.2f}); ratio to the path: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}), n = {runs}")


if __name__ == "__main__":
    main()
