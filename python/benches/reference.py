"""wai's Python API against whileai 0.131 (the reference) on the same rows, same machine, one
run each: pass_at, compare (the rows against themselves with a shifted reward), hack_scan and
select (rl). The reference runs in its own interpreter (`REF_PYTHON`, a venv with whileai)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import wai

REFERENCE = r'''
import json, sys, time
import whileai as w
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
after = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
out = {}
t = time.perf_counter(); w.pass_at(rows); out["pass_at"] = time.perf_counter() - t
t = time.perf_counter(); w.compare(rows, after); out["compare"] = time.perf_counter() - t
t = time.perf_counter(); w.hack_scan(rows); out["hack_scan"] = time.perf_counter() - t
t = time.perf_counter(); w.select(rows, mode="rl"); out["select"] = time.perf_counter() - t
print(json.dumps(out))
'''


def main() -> None:
    src, ref_python = Path(sys.argv[1]), sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        # The "after" run: the same rows, every fifth reward flipped.
        after = Path(tmp) / "after.jsonl"
        with open(src) as f, open(after, "w") as out:
            for i, line in enumerate(f):
                row = json.loads(line)
                if i % 5 == 0 and isinstance(row.get("reward"), (int, float)):
                    row["reward"] = 1.0 - row["reward"]
                out.write(json.dumps(row) + "\n")
        ours = {}
        for name, fn in {
            "pass_at": lambda: wai.pass_at(src),
            "compare": lambda: wai.compare(src, after),
            "hack_scan": lambda: wai.hack_scan(src),
            "select": lambda: wai.select(src, mode="rl"),
        }.items():
            start = time.perf_counter()
            fn()
            ours[name] = time.perf_counter() - start
        got = subprocess.run([ref_python, "-c", REFERENCE, str(src), str(after)], capture_output=True, text=True, check=True)
        theirs = json.loads(got.stdout.strip().splitlines()[-1])
    for name in ours:
        print(f"{name:10} wai {ours[name]:7.2f} s   whileai {theirs[name]:8.2f} s   {theirs[name] / ours[name]:6.1f}x")


if __name__ == "__main__":
    main()
