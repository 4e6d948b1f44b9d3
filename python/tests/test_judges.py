"""Python judges on the engine's worker pool: statuses as the judge contract gives them, and a
judge that raises, returns garbage or hangs marks only its own rows."""

from __future__ import annotations

import threading
import time
from typing import Any

import wai


def rows(n: int) -> list[dict[str, Any]]:
    return [{"task_id": f"t{i % 5}", "prompt": f"ask {i}", "final_text": f"answer {i}"} for i in range(n)]


def by_prompt(scored: wai.Scored) -> dict[str, dict[str, Any]]:
    return {r["prompt"]: r for r in scored.rows.rows()}


def test_a_judge_that_raises_returns_garbage_or_hangs_marks_only_its_rows() -> None:
    release = threading.Event()

    def judge(row: dict[str, Any]) -> Any:
        n = int(row["prompt"].split()[1])
        if n == 3:
            raise RuntimeError("the rubric service is down")
        if n == 5:
            return "great"
        if n == 7:
            return {"reason": "no reward key"}
        if n == 9:
            release.wait(30)  # hangs past the timeout
            return 1.0
        return {"reward": n % 2, "reason": "parity", "markers": {"odd": float(n % 2)}}

    try:
        scored = wai.evaluate(rows(20), judge, concurrency=4, timeout=1.5)
    finally:
        release.set()
    got = by_prompt(scored)
    assert got["ask 3"]["judge_status"] == "error"
    assert "the rubric service is down" in str(got["ask 3"].get("judge_meta") or got["ask 3"].get("reason"))
    assert got["ask 5"]["judge_status"] == "invalid_result"
    assert got["ask 7"]["judge_status"] == "missing_reward"
    assert got["ask 9"]["judge_status"] == "timeout"
    for n in set(range(20)) - {3, 5, 7, 9}:
        row = got[f"ask {n}"]
        assert row["judge_status"] == "ok", (n, row)
        assert row["reward"] == n % 2
        assert row["markers"] == {"odd": float(n % 2)}
    assert {r["judge_name"] for r in got.values()} == {"judge"}


def test_a_judge_runs_on_concurrency_threads() -> None:
    seen: set[int] = set()
    lock = threading.Lock()

    def judge(row: dict[str, Any]) -> float:
        with lock:
            seen.add(threading.get_ident())
        time.sleep(0.01)
        return 1.0

    scored = wai.evaluate(rows(200), judge, concurrency=8)
    assert len(scored.rows) == 200
    assert len(seen) >= 4, f"{len(seen)} threads"


def test_spec_strings_work_where_the_cli_takes_them() -> None:
    scored = wai.evaluate(rows(10), "sql:CASE WHEN final_text LIKE '%1%' THEN 1.0 ELSE 0.0 END")
    got = by_prompt(scored)
    assert got["ask 1"]["reward"] == 1.0 and got["ask 2"]["reward"] == 0.0


def test_numpy_verdicts_and_an_escaping_base_exception() -> None:
    import numpy as np

    def judge(row: dict[str, Any]) -> Any:
        n = int(row["prompt"].split()[1])
        if n == 2:
            raise SystemExit("a judge that calls exit()")
        if n == 4:
            return np.bool_(True)
        return {"reward": np.float32(n % 2), "markers": {"odd": np.float64(n % 2)}}

    got = by_prompt(wai.evaluate(rows(8), judge, concurrency=2, timeout=5))
    assert got["ask 2"]["judge_status"] == "error"
    assert "SystemExit" in str(got["ask 2"].get("reason"))
    assert got["ask 4"]["judge_status"] == "ok" and got["ask 4"]["reward"] == 1.0
    for n in (0, 1, 3, 5, 6, 7):
        assert got[f"ask {n}"]["judge_status"] == "ok", got[f"ask {n}"]
        assert got[f"ask {n}"]["reward"] == n % 2


def test_ctrl_c_stops_a_long_grade_at_once_and_the_judge_soon_after() -> None:
    calls: list[float] = []

    def slow(row: dict[str, Any]) -> float:
        calls.append(time.monotonic())
        time.sleep(0.2)
        return 1.0

    import _thread

    timer = threading.Timer(0.6, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        wai.evaluate(rows(200), slow, concurrency=1)  # 40 s if it ran to the end
        raise AssertionError("the grade was not interrupted")
    except KeyboardInterrupt:
        pass
    finally:
        timer.cancel()
    assert time.monotonic() - started < 2.0
    # The abandoned command stops asking: the judge is called at most once more.
    time.sleep(1.0)
    seen = len(calls)
    time.sleep(1.0)
    assert len(calls) == seen, "the judge is still being called"
    assert seen < 20
