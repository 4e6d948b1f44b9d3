"""Turn a Python function into a `wai grade --judge cmd:...` judge.

    # judge.py
    from wai_judge import serve

    def judge(row):
        ok = "refund" in row["final_text"].lower()
        return {"reward": float(ok), "reason": "mentions the refund" if ok else "no refund"}

    serve(judge)

Then: wai grade rows.parquet --judge cmd:"python judge.py" --out scored.parquet

Each request is one line `{"id": N, "row": {...}}` (the row as JSON, the reference's format);
each reply is one line: the verdict with the same id. A verdict is a dict with `reward` (0 to 1,
a bool, or None with a `reason`), `reason`, optional `markers` ({name: 0..1 or None}), and any
other keys (kept in `judge_meta`); a bare number or bool is a reward. An exception becomes
`{"id": N, "error": "..."}`, which marks that row `error`; the worker goes on. What the judge
prints goes to stderr (stdout carries the replies).
"""

import json
import sys
import time
import traceback

__all__ = ["serve"]


def _reply(judge, line):
    request = json.loads(line)
    rid = request.get("id")
    try:
        verdict = judge(request["row"])
        if not isinstance(verdict, dict):
            verdict = {"reward": verdict}
        reply = dict(verdict)
        reply["id"] = rid
    except Exception as e:  # the row is marked `error`; the worker goes on
        tail = traceback.format_exc().strip().splitlines()[-3:]
        reply = {"id": rid, "error": f"{type(e).__name__}: {e}", "traceback": tail}
    try:
        text = json.dumps(reply, allow_nan=False, default=str)
    except ValueError as e:  # NaN or infinity: not JSON
        text = json.dumps({"id": rid, "error": f"the verdict is not JSON: {e}"})
    return text.encode() + b"\n"


def serve(judge):
    """Answer requests on stdin with judge(row) until stdin closes.

    Requests are read as they arrive, in whatever bulk the pipe holds; replies go out in bulk
    too, but never wait more than 50 ms behind a slow judge.
    """
    inp = sys.stdin.buffer.raw
    out = sys.stdout.buffer
    # stdout carries replies only: the judge's own prints go to stderr.
    sys.stdout = sys.stderr
    pending = bytearray()
    while True:
        chunk = inp.read(1 << 16)
        if not chunk:
            break
        pending += chunk
        end = pending.rfind(b"\n")
        if end < 0:
            continue
        lines = bytes(pending[:end]).split(b"\n")
        del pending[: end + 1]
        last_flush = time.monotonic()
        for line in lines:
            if line.strip():
                out.write(_reply(judge, line))
                # A slow judge's replies go out at once; a fast one's, in bulk.
                if time.monotonic() - last_flush > 0.05:
                    out.flush()
                    last_flush = time.monotonic()
        out.flush()
    if pending.strip():
        out.write(_reply(judge, bytes(pending)))
        out.flush()


if __name__ == "__main__":
    sys.exit("import serve from this file: see its docstring")
