"""Turn a Python agent into a `wai simulate --agent cmd:...` agent.

    # agent.py
    import wai_agent

    def answer(ask):
        order = wai_agent.call_tool("lookup_order", {"order_id": "A1001"})
        return f"Order A1001 is {order.get('status')}."

    wai_agent.serve(answer)

Then: wai simulate --tools tools.json --policy policy.md --agent 'cmd:python3 agent.py' --out rows.parquet

Protocol (one JSON object per line): wai sends `{"id": N, "ask": "...", "task_id", "rollout_index",
"eval_run", "seed", "tools"}`: the ask and the tool names, never the hidden world state or the
fault plan (those stay in wai's mock world). `call_tool` sends `{"id": N, "call": {"tool",
"arguments"}}` and wai answers `{"id": N, "result": {...}}` from its mock world, scheduled faults
included. When the agent returns, its reply goes out as `{"id": N, "final_text": "...", "steps":
[...]}`. An exception becomes `{"id": N, "error": "..."}`.

Rollouts run on a thread pool; each thread records its own rollout's calls (`call_tool`, and
`record` for an agent that runs its own tools), so concurrent rollouts never mix their steps.
A rollout makes its calls one at a time, from the thread that runs the agent (the protocol has
one pending call per ask). From the moment this module is imported, what the process writes to
stdout (prints, logging, subprocesses) goes to stderr: stdout carries the protocol only.
"""

import json
import os
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["serve", "call_tool", "record", "current"]

_local = threading.local()
_lock = threading.Lock()
_waiting = {}
# The protocol keeps the real stdout; file descriptor 1 and sys.stdout now lead to stderr.
sys.stdout.flush()
_out = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
_closed = object()
_eof = False


def _send(obj):
    try:
        text = json.dumps(obj, default=str, allow_nan=False)
    except (TypeError, ValueError) as e:  # not JSON: the ask fails, the worker goes on
        text = json.dumps({"id": obj.get("id"), "error": f"the reply is not JSON: {e}"})
    with _lock:
        _out.write(text + "\n")
        _out.flush()


def current():
    """The request being played on this thread: ask, task_id, rollout_index, eval_run, seed,
    tools (None outside a rollout)."""
    return getattr(_local, "request", None)


def call_tool(tool, arguments=None):
    """Calls `tool` in wai's mock world and records the step; returns the result (a dict)."""
    request = current()
    if request is None:
        raise RuntimeError("call_tool runs inside a rollout (under serve)")
    if isinstance(arguments, (str, bytes)):
        arguments = json.loads(arguments or "{}")
    arguments = dict(arguments or {})
    answer = queue.Queue(maxsize=1)
    with _lock:
        if _eof:
            raise RuntimeError("wai closed the pipe; no call can be answered")
        _waiting[request["id"]] = answer
    _send({"id": request["id"], "call": {"tool": tool, "arguments": arguments}})
    result = answer.get()
    if result is _closed:
        raise RuntimeError("wai closed the pipe before answering the call")
    _local.steps.append({"tool": tool, "arguments": arguments, "result": result})
    return result


def record(tool, arguments, result):
    """Records a call the agent made to its own tools, as a step of this thread's rollout."""
    if current() is not None:
        _local.steps.append({"tool": tool, "arguments": dict(arguments or {}), "result": result})


def _play(agent, request):
    _local.request = request
    _local.steps = []
    out = {"id": request["id"], "error": "the agent stopped without a reply"}
    try:
        reply = agent(request["ask"])
        if isinstance(reply, dict):
            out = {"final_text": str(reply.get("final_text") or ""), "steps": reply.get("steps") or _local.steps}
        else:
            out = {"final_text": "" if reply is None else str(reply), "steps": _local.steps}
        out["id"] = request["id"]
    except BaseException as e:  # the rollout failed (even on sys.exit); the worker goes on
        out = {"id": request["id"], "error": f"{type(e).__name__}: {e}"}
    finally:
        _local.request = None
    _send(out)


def serve(agent, threads=4):
    """Plays the asks on stdin with agent(ask) until stdin closes."""
    pool = ThreadPoolExecutor(max_workers=threads)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "result" in msg:
            with _lock:
                waiting = _waiting.pop(msg.get("id"), None)
            if waiting is not None:
                waiting.put(msg["result"])
            continue
        if "ask" in msg:
            pool.submit(_play, agent, msg)
    # stdin closed: no call will be answered now; release the rollouts that wait on one.
    global _eof
    with _lock:
        _eof = True
        waiting = list(_waiting.values())
        _waiting.clear()
    for q in waiting:
        q.put(_closed)
    pool.shutdown(wait=True, cancel_futures=True)
