"""Python judges and agents, served to the engine's worker pool in this process.

The engine sends one request line per row (a judge) or ask (an agent) and reads one reply line
each, as it does with a judge or agent program over a pipe (`python/wai_judge.py`,
`python/wai_agent.py`): the same timeouts, retries and statuses. Here the lines go through
channels, and each request runs on a thread of a pool of `concurrency` threads, so functions
that wait on I/O overlap. The engine's own work runs with the GIL released.
"""

from __future__ import annotations

import json
import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

_local = threading.local()
_closed = object()


def _plain(value: Any) -> Any:
    """A value JSON has no word for: numpy's scalars as the numbers they hold, the rest as text."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    return str(value)


def _dumps(obj: dict[str, Any]) -> str:
    try:
        return json.dumps(obj, default=_plain, allow_nan=False)
    except (TypeError, ValueError) as e:
        return json.dumps({"id": obj.get("id"), "error": f"the reply is not JSON: {e}"})


def _error(e: BaseException) -> str:
    tail = traceback.format_exception(type(e), e, e.__traceback__)[-1].strip()
    return tail or type(e).__name__


class _Server:
    """One function served to the engine; `serve` runs once per worker, on the engine's thread.

    The worker's request lines go to `concurrency` threads through a queue: a judge's lines are
    parsed on those threads; an agent's on the serving thread, which must route the answers to
    its tool calls. Threads are daemons and are not joined: a function that hangs cannot be
    stopped, so its thread is left to finish, and its answer is not read (the engine marked its
    request when the timeout passed)."""

    #: Whether request lines are parsed on the serving thread (to route `result` lines).
    routes_results = False

    def __init__(self, fn: Callable[..., Any], concurrency: int) -> None:
        self.fn = fn
        self.concurrency = max(1, int(concurrency))

    def serve(self, lines: Any, replies: Any) -> None:
        work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        waiting: dict[Any, Any] = {}
        lock = threading.Lock()
        closed = threading.Event()
        for i in range(self.concurrency):
            threading.Thread(target=self._work, args=(work, replies, waiting, lock, closed), name=f"wai-py-{i}", daemon=True).start()
        try:
            while True:
                batch = lines.next_batch(0.25)
                if batch is None:
                    break
                for line in batch:
                    if not self.routes_results:
                        work.put(line)
                        continue
                    msg = json.loads(line)
                    if "result" in msg:
                        with lock:
                            answer = waiting.pop(msg.get("id"), None)
                        if answer is not None:
                            answer.put(msg["result"])
                        continue
                    work.put(msg)
        finally:
            # The worker is ended (the run is over, or it was replaced after a timeout): what is
            # queued is not started (the engine asks again elsewhere), and calls waiting on the
            # mock world are released.
            with lock:
                closed.set()
                pending = list(waiting.values())
                waiting.clear()
            for answer in pending:
                answer.put(_closed)
            while True:
                try:
                    work.get_nowait()
                except queue.Empty:
                    break
            for _ in range(self.concurrency):
                work.put(_closed)

    def _work(self, work: queue.SimpleQueue[Any], replies: Any, waiting: Any, lock: threading.Lock, closed: threading.Event) -> None:
        while True:
            item = work.get()
            if item is _closed or closed.is_set():
                return
            try:
                msg = json.loads(item) if isinstance(item, str) else item
            except ValueError:
                continue  # not a request: the engine only sends JSON
            _local.closed = closed
            try:
                self._one(msg, replies, waiting, lock)
            except BaseException as e:  # noqa: BLE001 (the thread must live on to serve the next)
                replies.send(_dumps({"id": msg.get("id"), "error": _error(e)}))

    def _one(self, msg: dict[str, Any], replies: Any, waiting: Any, lock: threading.Lock) -> None:
        raise NotImplementedError


class JudgeServer(_Server):
    """A judge: `fn(row) -> verdict` (a dict with `reward`, `reason`, `markers`, or a bare
    number or bool). An exception marks the row `error`; anything else the engine reads as the
    judge contract says (`invalid_result`, `missing_reward`)."""

    def _one(self, msg: dict[str, Any], replies: Any, waiting: Any, lock: threading.Lock) -> None:
        rid = msg.get("id")
        try:
            verdict = self.fn(msg["row"])
            reply = dict(verdict) if isinstance(verdict, dict) else {"reward": verdict}
            reply["id"] = rid
        except BaseException as e:  # noqa: BLE001 (the row is marked `error`; the others go on)
            reply = {"id": rid, "error": _error(e)}
        replies.send(_dumps(reply))


def current() -> dict[str, Any] | None:
    """The ask being played on this thread (ask, task_id, rollout_index, eval_run, seed, tools),
    or None outside a rollout."""
    request: dict[str, Any] | None = getattr(_local, "request", None)
    return request


def call_tool(tool: str, arguments: dict[str, Any] | str | None = None) -> Any:
    """Calls `tool` in wai's mock world (scheduled faults included) from inside a rollout, and
    records the step. Returns the result."""
    request = current()
    if request is None:
        raise RuntimeError("wai.call_tool runs inside a rollout of wai.simulate")
    parsed: Any = json.loads(arguments or "{}") if isinstance(arguments, str) else arguments
    args: dict[str, Any] = dict(parsed or {})
    answer: queue.Queue[Any] = queue.Queue(maxsize=1)
    with _local.lock:
        if _local.closed.is_set():
            raise RuntimeError("the rollout was ended (the run is over, or it timed out)")
        _local.waiting[request["id"]] = answer
    if not _local.replies.send(_dumps({"id": request["id"], "call": {"tool": tool, "arguments": args}})):
        raise RuntimeError("the run is over: the call cannot be answered")
    result = answer.get()
    if result is _closed:
        raise RuntimeError("the rollout was ended before the call was answered")
    _local.steps.append({"tool": tool, "arguments": args, "result": result})
    return result


class AgentServer(_Server):
    """An agent: `fn(ask) -> str | {"final_text", "steps"}`; tools through `wai.call_tool`."""

    routes_results = True

    def _one(self, msg: dict[str, Any], replies: Any, waiting: Any, lock: threading.Lock) -> None:
        rid = msg.get("id")
        _local.request, _local.steps = msg, []
        _local.replies, _local.waiting, _local.lock = replies, waiting, lock
        try:
            reply = self.fn(msg["ask"])
            if isinstance(reply, dict):
                out = {"final_text": str(reply.get("final_text") or ""), "steps": reply.get("steps") or _local.steps}
            else:
                out = {"final_text": "" if reply is None else str(reply), "steps": _local.steps}
            out["id"] = rid
        except BaseException as e:  # noqa: BLE001 (the rollout failed; the others go on)
            out = {"id": rid, "error": _error(e)}
        finally:
            _local.request = None
        replies.send(_dumps(out))
