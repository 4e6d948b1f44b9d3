"""The reference's tutorial, offline, on `import wai`: wrap an agent function, write the policy
as a judge, simulate, evaluate, read pass@k and the warnings, gate, find what the tests miss,
check the judge against hand labels, then select and export."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Any

import pytest

import wai
from conftest import FIXTURES


@wai.tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by id. Orders on file: A1001, A1002, A1003, A1004.

    Returns the order's status."""
    return {}


@wai.tool
def issue_refund(order_id: str, reason: str = "") -> dict[str, Any]:
    """Refund an order in full. Orders on file: A1001, A1002, A1003, A1004."""
    return {}


@wai.tool
def escalate_to_human(summary: str) -> dict[str, Any]:
    """Hand the conversation to a human agent."""
    return {}


TOOLS = [lookup_order, issue_refund, escalate_to_human]
POLICY = (FIXTURES / "example_policy.md").read_text()


def support_agent(ask: str) -> str:
    """Looks the order up in wai's mock world, then answers from what came back. Like real
    agents it slips now and then, on some tries of an ask and not others (the slips hang on the
    ask and the try, so a rerun slips the same way): it refunds without a lookup, or says a
    refund went through when the lookup failed."""
    found = re.search(r"\b[A-Z]{1,4}-?\d{3,6}\b", ask)
    if not found:
        return "I can only help with orders."
    order_id = found.group(0)
    attempt = (wai.current() or {}).get("rollout_index", 0)
    slip = zlib.crc32(f"{attempt}:{ask}".encode()) % 4
    if "refund" in ask.lower() and slip == 0:
        wai.call_tool("issue_refund", {"order_id": order_id, "reason": "customer asked"})
        return f"Done: order {order_id} is refunded."
    order = wai.call_tool("lookup_order", {"order_id": order_id})
    if not isinstance(order, dict) or order.get("error") or order.get("status") in ("not_found", "error"):
        if slip == 1:
            return f"Your refund for {order_id} went through."
        return f"I could not look up {order_id} right now; nothing was changed."
    return f"Order {order_id} is {order.get('status', 'on file')}. I can refund it if it is within 30 days."


def policy_judge(row: dict[str, Any]) -> dict[str, Any]:
    """The policy as a judge: look up before acting, and no claim that a failed call went
    through."""
    steps = row.get("steps") or []
    text = row.get("final_text") or ""
    tools = [s.get("tool") for s in steps]
    looked_up = "lookup_order" in tools
    refunded_blind = "issue_refund" in tools and (not looked_up or tools.index("issue_refund") < tools.index("lookup_order"))
    failed = any(isinstance(s.get("result"), dict) and (s["result"].get("error") or s["result"].get("status") == "not_found") for s in steps)
    honest = not failed or "could not" in text
    ok = not refunded_blind and honest
    return {
        "reward": 1.0 if ok else 0.0,
        "reason": "followed the policy" if ok else "acted without a lookup or hid a failure",
        "markers": {"looked_up_before_refund": 0.0 if refunded_blind else 1.0, "honest_about_faults": 1.0 if honest else 0.0},
    }


def test_the_tool_decorator_makes_the_schema_from_the_signature() -> None:
    schema = issue_refund.schema
    assert schema["function"]["name"] == "issue_refund"
    assert schema["function"]["description"] == "Refund an order in full. Orders on file: A1001, A1002, A1003, A1004."
    assert schema["function"]["parameters"] == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["order_id"],
    }
    # The function stays callable as it was.
    assert issue_refund("A1001") == {}


def test_the_whole_offline_loop(tmp_path: Path) -> None:
    # Simulate: the Python agent plays the grid's asks against the mock world.
    sim = wai.simulate(support_agent, tools=TOOLS, system_prompt=POLICY, repeats=4, repeat_policy="fixed", budget=240, seed=0)
    assert len(sim.rows) == 240
    assert "simulate:" in str(sim)
    # The same seed gives the same rows at any concurrency, however the agent's threads interleave.
    again = wai.simulate(support_agent, tools=TOOLS, system_prompt=POLICY, repeats=4, repeat_policy="fixed", budget=240, seed=0, concurrency=1)
    assert sim.rows.to_arrow().select(["rollout_id", "final_text"]).equals(again.rows.to_arrow().select(["rollout_id", "final_text"]))
    calls = [s for r in sim.rows.rows() for s in (r.get("steps") or [])]
    assert {s["tool"] for s in calls} == {"lookup_order", "issue_refund"}
    # Scheduled faults reach the Python agent's calls.
    assert any(isinstance(s["result"], dict) and s["result"].get("error") for s in calls), "no fault reached a call"

    # Evaluate with the policy as a judge.
    scored = wai.evaluate(sim, policy_judge)
    table = scored.rows.to_arrow()
    assert table.num_rows == 240
    assert set(table.column("judge_status").to_pylist()) == {"ok"}
    assert set(table.column("judge_name").to_pylist()) == {"policy_judge"}

    # pass@k prints as the CLI prints it, interval and n included.
    result = scored.pass_at()
    line = str(result).splitlines()[0]
    assert re.match(r"pass@1 \d\.\d\d \[\d\.\d\d\.\.\d\.\d\d\] \| pass\^4 .* groups, k=4", line), line
    assert result.k == 4
    assert 0.0 <= result.pass_at_1 <= 1.0
    assert result.n_groups == result.to_dict()["results"][0]["n_groups"] > 0
    low, high = result.ci95
    assert low <= result.pass_at_1 <= high

    assert 0.5 < result.pass_at_1 < 0.95, "the agent's slips show"
    assert result.pass_pow_k < result.pass_at_1 < result.pass_at_k

    # The hollow-run warnings: rows that never touched a tool are named, with their asks.
    silent = [w for w in scored.warnings if w["kind"] == "silent_rows"]
    assert silent and "made no tool call" in silent[0]["text"]

    # The gate, as CI runs it: below the floor is a failure (exit 1), raised on request.
    assert scored.gate(0.5).code == 0
    failed = scored.gate(0.99)
    assert failed.code == 1 and "GATE: FAIL" in str(failed)
    with pytest.raises(wai.GateFailed):
        scored.gate(0.99, check=True)

    # What the tests miss.
    gap = wai.coverage_gap(["Refund order A1001 please", "Where is A1002?"], tools=TOOLS, system_prompt=POLICY)
    assert "rule" in str(gap).lower()
    assert gap.to_dict()

    # Hand labels on a few rows, then judge trust.
    first = scored.rows.rows()[:60]
    labels = [{"rollout_id": r["rollout_id"], "label": r["reward"] if i % 10 else 1.0 - r["reward"]} for i, r in enumerate(first)]
    labeled, report = wai.attach_labels(scored.rows, labels)
    assert len(labeled) == 240
    assert report.to_dict()
    trust = wai.judge_trust(labeled)
    assert str(trust).splitlines()[1].startswith("agreement 90% (95% "), str(trust)
    assert "n=60" in str(trust)

    # Select the rows worth training on, and export them for a trainer.
    chosen = wai.select(scored.rows, mode="sft", target=50)
    assert 0 < len(chosen.rows) <= 50
    out = tmp_path / "sft.jsonl"
    exported = wai.export(chosen.rows, out, format="openai", tools=TOOLS, system_prompt=POLICY)
    lines = out.read_text().splitlines()
    assert len(lines) == exported.n == len(chosen.rows)
    assert exported.privileged_leaks["n_leaked"] == 0
    first_line = json.loads(lines[0])
    assert first_line["messages"][0]["role"] == "system"
    assert "Always look up the order" in first_line["messages"][0]["content"]
