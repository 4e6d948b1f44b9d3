"""Turn a Python agent into a `wai simulate --agent cmd:...` agent.

    # agent.py
    import wai_agent

    def answer(ask):
        order = wai_agent.call_tool("lookup_order", {"order_id": "A1001"})
        return f"Order A1001 is {order.get('status')}."

    wai_agent.serve(answer)

Then: wai simulate --tools tools.json --policy policy.md --agent 'cmd:python3 agent.py' --out rows.parquet

Protocol (one JSON object per line): wai sends `{"id": N, "ask": "...", "task_id", "rollout_index",
"eval_run", "seed", "world_state", "faults", "tools"}`. `call_tool` sends `{"id": N, "call": {"tool",
"arguments"}}` and wai answers `{"id": N, "result": {...}}` from its mock world, scheduled faults
included. When the agent returns, its reply goes out as `{"id": N, "final_text": "...", "steps":
[...]}`. An exception becomes `{"id": N, "error": "..."}`.

Rollouts run on a thread pool; each thread records its own rollout's calls (`call_tool`, and
`record` for an agent that runs its own tools), so concurrent rollouts never mix their steps.
What the agent prints goes to stderr (stdout carries the protocol).
"""

import json
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["serve", "call_tool", "record", "current"]

_local = threading.local()
_lock = threading.Lock()
_waiting = {}
_out = sys.stdout


def _send(obj):
    text = json.dumps(obj, default=str)
    with _lock:
        _out.write(text + "\n")
        _out.flush()


def current():
    """The request being played on this thread: ask, task_id, rollout_index, eval_run, seed,
    world_state, faults, tools (None outside a rollout)."""
    return getattr(_local, "request", None)


def call_tool(tool, arguments=None):
    """Calls `tool` in wai's mock world and records the step; returns the result (a dict)."""
    request = current()
    if request is None:
        raise RuntimeError("call_tool runs inside a rollout (under serve)")
    arguments = dict(arguments or {})
    answer = queue.Queue(maxsize=1)
    with _lock:
        _waiting[request["id"]] = answer
    _send({"id": request["id"], "call": {"tool": tool, "arguments": arguments}})
    result = answer.get()
    _local.steps.append({"tool": tool, "arguments": arguments, "result": result})
    return result


def record(tool, arguments, result):
    """Records a call the agent made to its own tools, as a step of this thread's rollout."""
    if current() is not None:
        _local.steps.append({"tool": tool, "arguments": dict(arguments or {}), "result": result})


def _play(agent, request):
    _local.request = request
    _local.steps = []
    try:
        reply = agent(request["ask"])
        if isinstance(reply, dict):
            out = {"final_text": str(reply.get("final_text") or ""), "steps": reply.get("steps") or _local.steps}
        else:
            out = {"final_text": "" if reply is None else str(reply), "steps": _local.steps}
        out["id"] = request["id"]
    except Exception as e:  # the rollout failed; the worker goes on
        out = {"id": request["id"], "error": f"{type(e).__name__}: {e}"}
    finally:
        _local.request = None
    _send(out)


def serve(agent, threads=4):
    """Plays the asks on stdin with agent(ask) until stdin closes."""
    global _out
    _out = sys.stdout
    sys.stdout = sys.stderr
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
    pool.shutdown(wait=False)
