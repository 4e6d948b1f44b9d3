"""Model specs work where the command line takes them: an LLM judge from Python, against the
deterministic OpenAI-compatible server of wai's tests on 127.0.0.1 (`WAI_MODEL_SERVER`, the
`wai-model-server` binary; `tests/it/python.rs` passes it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wai


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    exe = os.environ.get("WAI_MODEL_SERVER")
    if not exe:
        pytest.skip("set WAI_MODEL_SERVER to the wai-model-server binary")
    proc = subprocess.Popen([exe], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    base = proc.stdout.readline().strip()
    try:
        yield base
    finally:
        proc.kill()
        proc.wait()


def rows(n: int) -> list[dict[str, Any]]:
    # The server scores a reply that says PASS 1, FAIL 0.
    return [
        {"task_id": f"t{i // 2}", "rollout_id": f"r{i}", "prompt": f"ask {i}",
         "steps": [{"tool": "lookup", "arguments": {"id": i}, "result": {"status": "ok"}}],
         "final_text": f"PASS {i}" if i % 2 == 0 else f"FAIL {i}"}
        for i in range(n)
    ]


def test_an_llm_judge_from_python_and_its_cache(server: str, tmp_path: Path) -> None:
    spec = f"llm:endpoint:judge-m@{server}"
    scored = wai.evaluate(rows(10), spec, cache=tmp_path / "cache", no_tools=True, retry_wait=0.001)
    got = {r["rollout_id"]: r for r in scored.rows.rows()}
    assert len(got) == 10
    for i in range(10):
        row = got[f"r{i}"]
        assert row["judge_status"] == "ok", row
        assert row["reward"] == (1.0 if i % 2 == 0 else 0.0)
        assert row["judge_name"] == "llm:judge-m"
        assert row["judge_meta"]["cached"] is False
    again = wai.evaluate(rows(10), spec, cache=tmp_path / "cache", no_tools=True)
    assert all(r["judge_meta"]["cached"] is True for r in again.rows.rows()), "the rerun asks nothing"


def test_an_endpoint_nobody_answers_marks_its_rows_and_the_run_hollow(tmp_path: Path) -> None:
    scored = wai.evaluate(rows(2), "llm:endpoint:m@http://127.0.0.1:9/v1", cache=tmp_path / "cache", no_tools=True, retries=0, retry_wait=0.001)
    assert scored.code == 2, str(scored)
    assert {r["judge_status"] for r in scored.rows.rows()} == {"error"}
    assert "unreachable" in str(scored)
    with pytest.raises(wai.HollowRun):
        scored.gate(0.5, check=True)
