"""wai for Python: evaluate tool-using LLM agents and turn their rollouts into training data.

The offline API of the reference SDK (whileai 0.131): the same names and result fields, on the
wai engine (Rust: DataFusion, Arrow). Rows go in as a path, a glob, a URL, a list of dicts, or
Arrow data from any library (pyarrow, Polars, pandas: the Arrow PyCapsule interface, zero-copy
where the data is already in wai's row schema); rows come out as `wai.Rows` (a `pyarrow.Table`
with `.to_polars()` and `.rows()`). Every report prints as `wai` on the command line prints it
and has `to_dict()` (the `--json` report). Errors are `wai.Error`s, one class per exit code.

    import wai
    scored = wai.evaluate(rows, judge=my_judge)
    print(scored.pass_at())                        # pass@1 0.72 [0.69..0.75] | ...
"""

from __future__ import annotations

import inspect
import json
import os
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import _wai
from ._core import Scratch, flags, json_file, rows_spec, run, text_file
from ._errors import (
    BudgetSpent,
    DataError,
    Error,
    GateFailed,
    HollowRun,
    InternalError,
    IOError_,
    MissingInput,
    Unavailable,
    UsageError,
)
from ._results import PassAt, Report, Rows, Scored, Simulation, WithRows
from ._serve import AgentServer, JudgeServer, call_tool, current

__version__ = _wai.version()

__all__ = [
    "BudgetSpent", "DataError", "Error", "GateFailed", "HollowRun", "IOError_", "InternalError",
    "MissingInput", "PassAt", "Report", "Rows", "Scored", "Simulation", "Unavailable",
    "UsageError", "WithRows", "attach_labels", "call_tool", "compare", "compare_judges",
    "coverage_gap", "current", "decontaminate", "delta_report", "eval_variance", "evaluate",
    "export", "gate", "grade", "hack_scan", "holdout_size", "judge_trust", "marker_summary",
    "pass_at", "preflight", "read", "rows_from_otel", "select", "simulate", "sql", "tool",
]

Data = Any
"""Rows: a path, glob or URL (or a list of them), a list of dicts, a `wai.Rows`, or Arrow data
(`pyarrow.Table`/`RecordBatchReader`, `polars.DataFrame`/`LazyFrame`, `pandas.DataFrame`)."""


# Requests in flight on one worker of the engine's pool: a Python function's `concurrency` is
# spread over enough workers that each holds at most this many.
_WINDOW = 64


def _workers(fn: Any, concurrency: int) -> int | None:
    """The `--workers` for a Python function (None for a spec: the command's own default)."""
    return -(-max(1, concurrency) // _WINDOW) if callable(fn) and not isinstance(fn, str) else None


def _served(server: Callable[[Callable[..., Any], int], Any], fn: Callable[..., Any], concurrency: int, name: str, scratch: Scratch) -> str:
    """`fn` served to the engine in this process (kept registered by `scratch`), its
    `concurrency` threads spread over the workers `_workers` gives: the `cmd:` spec naming it."""
    threads = -(-max(1, concurrency) // (_workers(fn, concurrency) or 1))
    program = _wai.register_program(server(fn, threads), name)
    scratch.keep.append(program)
    return "cmd:" + program.command


def _judge_spec(judge: Any, scratch: Scratch, concurrency: int, name: str | None = None) -> str:
    """A judge spec: a callable served in this process, or a spec string as the CLI takes it."""
    if isinstance(judge, str):
        return judge
    if callable(judge):
        return _served(JudgeServer, judge, concurrency, name or _name_of(judge), scratch)
    raise UsageError(f"a judge is a function or a spec string (`verify:...`, `sql:...`, `cmd:...`, a model), not a {type(judge).__name__}")


def _name_of(fn: Any) -> str:
    name = getattr(fn, "__name__", None) or getattr(fn, "name", None) or "judge"
    return "lambda_judge" if name == "<lambda>" else str(name)


def _tools_file(tools: Any, scratch: Scratch) -> str | None:
    if tools is None:
        return None
    if isinstance(tools, (str, os.PathLike)):
        return json_file(scratch, "tools.json", tools)
    schemas = [getattr(t, "schema", t) for t in tools]
    return json_file(scratch, "tools.json", schemas)


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


_R = typing.TypeVar("_R", bound=WithRows)


def _rows_out(args: list[str], scratch: Scratch, *, ok: Sequence[int] = (0, 1, 2), cls: type[_R], lines: bool = False) -> _R:
    """Runs a command that writes rows (or, with `lines`, JSON lines such as preference pairs)
    to `--out`, and returns its report with what it wrote as `.rows`."""
    out = scratch.file("out.jsonl" if lines else "out.parquet")
    outcome = run([*args, "--out", out], ok=ok)
    if not os.path.exists(out):
        rows = Rows(_empty())
    elif lines:
        import pyarrow as pa

        with open(out, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        # As a table, a nested value (a conversation, a tool call) is its JSON text; the records
        # themselves are the result's `.pairs`.
        flat = [{k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()} for r in records]
        rows = Rows(pa.Table.from_pylist(flat))
    else:
        rows = Rows._read(out)
    # The rows are the result's `.rows`, not a file: the text says so.
    text = outcome.text.replace(f"`{out}`", "`.rows`")
    result = cls(text, outcome.envelope, rows, outcome.code)
    if lines:
        result.pairs = records
    return result


def _empty() -> Any:
    import pyarrow as pa

    return pa.table({})


def read(data: Data) -> Rows:
    """Rows from any input (a JSONL or Parquet path, a glob, a URL, dicts, Arrow data), read as
    every command reads them: the row schema, ids derived where missing."""
    with Scratch() as scratch:
        spec = rows_spec(data, scratch)
        out = scratch.file("rows.parquet")
        run(["convert", *spec, "--out", out], ok=(0,))
        return Rows._read(out)


# ---- measure ------------------------------------------------------------------------------


def pass_at(
    rows: Data,
    k: int | Sequence[int] | None = None,
    min_k: int = 4,
    unanimous_short: bool = False,
    *,
    by: str | Sequence[str] | None = None,
    seed: int = 0,
    n_boot: int = 2000,
    interval: str | None = None,
) -> PassAt:
    """pass@1, pass^k and pass@k with 95% task-bootstrap intervals (`wai pass-at`)."""
    ks = [k] if isinstance(k, int) else list(k or [])
    bys = [by] if isinstance(by, str) else list(by or [])
    with Scratch() as scratch:
        o = run(["pass-at", *rows_spec(rows, scratch), *flags(k=ks, min_k=min_k, unanimous_short=unanimous_short, by=bys, seed=seed, draws=n_boot, interval=interval)])
        return PassAt(o.text, o.envelope, o.code)


def marker_summary(rows: Data, names: Sequence[str] | None = None, n_boot: int = 2000, seed: int = 0, *, interval: str | None = None) -> Report:
    """Per-marker means with task-bootstrap intervals (`wai markers`)."""
    with Scratch() as scratch:
        o = run(["markers", *rows_spec(rows, scratch), *flags(name=list(names or []), draws=n_boot, seed=seed, interval=interval)])
        return Report(o.text, o.envelope, o.code)


def compare(
    before: Data,
    after: Data,
    *,
    target: str | None = None,
    must_not_regress: str | Sequence[str] | None = None,
    lower_is_better: str | Sequence[str] | None = None,
    by: str | None = None,
    proxy: str | None = None,
    run_std: float | Mapping[str, float] | None = None,
    run_std_runs: int | None = None,
    changed: str | Sequence[str] | None = None,
    alpha: float | None = None,
    power: float | None = None,
    seed: int = 0,
    n_boot: int = 2000,
    interval: str | None = None,
) -> Report:
    """Is the change real? Before against after, task by task, with a noise floor
    (`wai compare`). `report.ok` is the gate; `report.headline_word` the headline. `run_std` is
    one number for every metric or a mapping metric -> number."""
    run_std_flag = ",".join(f"{m}={x}" for m, x in run_std.items()) if isinstance(run_std, Mapping) else run_std
    with Scratch() as scratch:
        b = rows_spec(before, scratch, "before")
        a = rows_spec(after, scratch, "after")
        if len(b) != 1 or len(a) != 1:
            raise UsageError("compare takes one input for before and one for after (a folder or glob is one)")
        o = run(["compare", b[0], a[0], *flags(
            target=target, must_not_regress=_as_list(must_not_regress),
            lower_is_better=_as_list(lower_is_better), by=by, proxy=proxy, run_std=run_std_flag,
            run_std_runs=run_std_runs,
            changed=_as_list(changed), alpha=alpha, power=power, seed=seed, draws=n_boot, interval=interval,
        )])
        return Report(o.text, o.envelope, o.code)


delta_report = compare


def eval_variance(*runs: Data, metric: str = "pass_at_1", by: str | None = None) -> Report:
    """How much a metric moves when the same tasks run again (`wai variance`): run_std, the
    noise band, a stability word. One input holding several `eval_run`s, or one per run."""
    with Scratch() as scratch:
        specs = [s for i, r in enumerate(runs) for s in rows_spec(r, scratch, f"run {i + 1}")]
        o = run(["variance", *specs, *flags(metric=metric, by=by)])
        return Report(o.text, o.envelope, o.code)


def holdout_size(
    effect: float | None = None,
    base: float = 0.6,
    k: int = 4,
    power: float = 0.8,
    alpha: float = 0.05,
    before: Data | None = None,
    after: Data | None = None,
    task_std: float | None = None,
    *,
    tasks: int | None = None,
    seed: int = 0,
) -> Report:
    """Tasks an eval needs to detect a gain, or the gain a task count can detect
    (`wai holdout-size`)."""
    with Scratch() as scratch:
        extra: list[str] = []
        if before is not None:
            extra += ["--before", *rows_spec(before, scratch, "before")[:1]]
        if after is not None:
            extra += ["--after", *rows_spec(after, scratch, "after")[:1]]
        o = run(["holdout-size", *flags(effect=effect, tasks=tasks, base=base, k=k, power=power, alpha=alpha, task_std=task_std, seed=seed), *extra])
        return Report(o.text, o.envelope, o.code)


def attach_labels(rows: Data, labels: Data, annotator: str | None = None, kind: str = "human", replace: bool = False) -> tuple[Rows, Report]:
    """Hand labels attached to rows as gold (`wai labels attach`): `(rows, report)`."""
    with Scratch() as scratch:
        r = rows_spec(rows, scratch)
        if isinstance(labels, (str, os.PathLike)):
            label_file = os.fspath(labels)
        else:
            items = [labels] if isinstance(labels, Mapping) else list(labels)
            label_file = scratch.write("labels.jsonl", "".join(json.dumps(x, default=str) + "\n" for x in items))
        if len(r) != 1:
            raise UsageError("attach_labels takes one input of rows")
        got = _rows_out(["labels", "attach", r[0], label_file, *flags(kind=kind, annotator=annotator, replace=replace)], scratch, cls=WithRows)
        return got.rows, Report(got.text, got.envelope, got.code)


def judge_trust(
    rows: Data,
    judge: Any = None,
    *,
    sample: int | None = None,
    seed: int = 0,
    probes: str | Sequence[str] | None = None,
    rubric: str | None = None,
    min_agreement: float = 0.8,
    min_kappa: float = 0.6,
    allow_model_gold: bool = False,
    length_gap_flag: float | None = None,
    flip_flag: float | None = None,
    max_skipped_share: float | None = None,
    concurrency: int = 8,
    timeout: float | None = None,
    **options: Any,
) -> Report:
    """Can the judge be trusted? Agreement with hand labels and whether it holds
    (`wai judge-trust`). With `judge` (a function or a spec), also perturbation and probes."""
    with Scratch() as scratch:
        extra: list[str] = []
        if judge is not None:
            extra += ["--judge", _judge_spec(judge, scratch, concurrency)]
            workers = _workers(judge, concurrency)
            if workers is not None:
                extra += ["--workers", str(workers)]
        probe = probes if isinstance(probes, str) or probes is None else ",".join(probes)
        o = run(["judge-trust", *rows_spec(rows, scratch), *extra, *flags(
            sample=sample, seed=seed, probes=probe, rubric=rubric, min_agreement=min_agreement,
            min_kappa=min_kappa, allow_model_gold=allow_model_gold, length_gap_flag=length_gap_flag,
            flip_flag=flip_flag, max_skipped_share=max_skipped_share, timeout=timeout, **options,
        )])
        return Report(o.text, o.envelope, o.code)


def compare_judges(rows: Data, judges: Mapping[str, Any], *, rubric: str | None = None, min_agreement: float = 0.8, min_kappa: float = 0.6, allow_model_gold: bool = False, concurrency: int = 8, timeout: float | None = None, **options: Any) -> Report:
    """Several judges (name -> function or spec) on the same hand-labeled rows, ranked by kappa
    (`wai compare-judges`)."""
    with Scratch() as scratch:
        specs = [f"{name}={_judge_spec(j, scratch, concurrency, name)}" for name, j in judges.items()]
        workers = max((_workers(j, concurrency) or 0 for j in judges.values()), default=0) or None
        o = run(["compare-judges", *rows_spec(rows, scratch), *flags(judge=specs, rubric=rubric, min_agreement=min_agreement, min_kappa=min_kappa, allow_model_gold=allow_model_gold, timeout=timeout, workers=workers, **options)])
        return Report(o.text, o.envelope, o.code)


def hack_scan(
    rows: Data,
    endorsed: Sequence[str] = (),
    features: Mapping[str, str] | None = None,
    auto: bool = True,
    top_k: int = 200,
    n_perm: int = 100,
    min_obs: int = 20,
    seeds: int = 12,
    seed: int = 0,
    top_features: int = 20,
    alpha: float = 0.05,
) -> Report:
    """What would a policy trained on this reward learn? Features that separate reward within a
    task, against a permutation floor (`wai hack-scan`). `features` maps a name to a SQL
    expression over the row."""
    with Scratch() as scratch:
        o = run(["hack-scan", *rows_spec(rows, scratch), *flags(
            endorsed=",".join(_as_list(endorsed)) or None, feature=[f"{n}={e}" for n, e in (features or {}).items()],
            no_auto=not auto, top_k=top_k, perms=n_perm, min_obs=min_obs, seeds=seeds, seed=seed,
            top=top_features, alpha=alpha,
        )])
        return Report(o.text, o.envelope, o.code)


def gate(rows: Data, floor: float, *, tools: Any = None, no_tools: bool = False, max_judge_failures: float | None = None, min_graded: float | None = None, k: int | None = None, seed: int = 0, check: bool = False) -> Report:
    """The CI check (`wai gate`): the pass@k line and the warnings; `report.code` is the exit
    code (1 below the floor, 2 hollow). With `check=True` a failed gate raises `GateFailed`."""
    with Scratch() as scratch:
        o = run(["gate", *rows_spec(rows, scratch), *flags(floor=floor, tools=_tools_file(tools, scratch), no_tools=no_tools, max_judge_failures=max_judge_failures, min_graded=min_graded, k=k, seed=seed)])
        if check and o.code == 1:
            raise GateFailed(o.text)
        if check and o.code == 2:
            raise HollowRun(o.text)
        return Report(o.text, o.envelope, o.code)


# ---- data ---------------------------------------------------------------------------------


def decontaminate(rows: Data, against: Data, *, n: int = 8, fields: Sequence[str] = ("prompt",), overlap: float = 0.8, embedder: str | None = None, similarity: float = 0.85, **options: Any) -> tuple[Rows, Report]:
    """Training rows without what overlaps the eval set (`wai decontaminate`): `(kept, report)`."""
    with Scratch() as scratch:
        against_specs = rows_spec(against, scratch, "against")
        got = _rows_out(["decontaminate", *rows_spec(rows, scratch), *flags(against=against_specs, fields=",".join(_as_list(fields)), n=n, overlap=overlap, embedder=embedder, similarity=similarity if embedder else None, **options)], scratch, cls=WithRows)
        return got.rows, Report(got.text, got.envelope, got.code)


def select(
    rows: Data,
    mode: str = "rl",
    target: int = 1000,
    *,
    lo: float | None = None,
    hi: float | None = None,
    truncated: str | None = None,
    min_reward: float | None = None,
    has_tools: bool = True,
    endorsed: Sequence[str] = (),
    min_margin: float | None = None,
    max_pairs_per_prompt: int | None = None,
    length_match: bool = False,
    **options: Any,
) -> WithRows:
    """The rows worth training on (`wai select`): `rl` keeps whole mixed groups, `sft` diverse
    passing demonstrations, `preference` chosen/rejected pairs (then `.pairs` holds them as
    written, and `.rows` as a table, nested values as JSON text). `.rows` and the report."""
    band = f"{lo if lo is not None else 0.2},{hi if hi is not None else 0.8}" if (lo is not None or hi is not None) else None
    with Scratch() as scratch:
        return _rows_out(["select", *rows_spec(rows, scratch), *flags(
            mode=mode, target=target, band=band, truncated=truncated, min_reward=min_reward,
            no_tools=not has_tools, endorsed=_as_list(endorsed), min_margin=min_margin,
            max_pairs_per_prompt=max_pairs_per_prompt, length_match=length_match, **options,
        )], scratch, cls=WithRows, lines=mode == "preference")


def export(rows: Data, output: str | os.PathLike[str], *, format: str = "openai", system_prompt: str | None = None, tools: Any = None, strip_think: bool = True, validate: bool = True, mask_mode: str | None = None, unroll: bool = False, max_tool_output_chars: int | None = None, force: bool = False) -> Report:
    """Rows into what trainers load (`wai export`): OpenAI chat JSONL, TRL, a Hugging Face
    Parquet folder. Returns the report (rows written, dropped and why, tokens)."""
    with Scratch() as scratch:
        o = run(["export", *rows_spec(rows, scratch), "--out", os.fspath(output), *flags(
            format=format, system_prompt=text_file(scratch, "system.md", system_prompt) if system_prompt else None,
            tools=_tools_file(tools, scratch), keep_think=not strip_think, no_validate=not validate,
            mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=max_tool_output_chars, force=force,
        )], ok=(0,))
        return Report(o.text, o.envelope, o.code)


def preflight(tools: Any, system_prompt: str = "", *, rule_cap: int | None = None, budget: int | None = None, repeats: int | None = None) -> Report:
    """What the simulator will make of the tools and policy, and what to fix first
    (`wai preflight`)."""
    with Scratch() as scratch:
        policy = text_file(scratch, "policy.md", system_prompt) if system_prompt else None
        o = run(["preflight", *flags(tools=_tools_file(tools, scratch), policy=policy, rule_cap=rule_cap, budget=budget, repeats=repeats)])
        return Report(o.text, o.envelope, o.code)


def coverage_gap(asks: Any, *, tools: Any, system_prompt: str = "", rows: Data | None = None, rule_cap: int | None = None) -> Report:
    """Which policy rules and tools a set of test asks reaches, and what the asks cannot say
    (`wai coverage-gap`). `asks`: a file, or a list of ask strings."""
    with Scratch() as scratch:
        if isinstance(asks, (str, os.PathLike)) and os.path.exists(asks):
            ask_file = os.fspath(asks)
        else:
            items = [asks] if isinstance(asks, str) else list(asks)
            ask_file = scratch.write("asks.jsonl", "".join(json.dumps({"prompt": a} if isinstance(a, str) else a) + "\n" for a in items))
        policy = text_file(scratch, "policy.md", system_prompt) if system_prompt else None
        rows_flag = rows_spec(rows, scratch)[0] if rows is not None else None
        o = run(["coverage-gap", ask_file, *flags(tools=_tools_file(tools, scratch), policy=policy, rows=rows_flag, rule_cap=rule_cap)])
        return Report(o.text, o.envelope, o.code)


def rows_from_otel(source: str | os.PathLike[str] | Sequence[str], *, reward_keys: str | Sequence[str] = ("whileai.reward",)) -> Rows:
    """Rows from OpenTelemetry GenAI spans (OTLP JSON files; `wai ingest --format otel`). wai
    reads the reward from one attribute (and from `gen_ai.evaluation.result` events); no span
    with a conversation gives no rows."""
    keys = _as_list(reward_keys)
    if len(keys) != 1:
        raise UsageError(f"rows_from_otel reads the reward from one attribute, not {len(keys)}: pass one key")
    with Scratch() as scratch:
        specs = [os.fspath(source)] if isinstance(source, (str, os.PathLike)) else [os.fspath(s) for s in source]
        got = _rows_out(["ingest", *specs, "--format", "otel", *flags(reward_attr=keys[0])], scratch, ok=(0, 2), cls=WithRows)
        rows: Rows = got.rows
        return rows


def sql(query: str, **tables: Data) -> Any:
    """SQL over rows (`wai sql`: DataFusion SQL with the JSON functions), each keyword a table
    (`wai.sql("SELECT task_id, avg(reward) FROM runs GROUP BY 1", runs=scored)`). Returns a
    `polars.DataFrame`."""
    import polars as pl

    with Scratch() as scratch:
        args = ["sql", query]
        for name, data in tables.items():
            for spec in rows_spec(data, scratch, name):
                args += ["--table", f"{name}={spec}"]
        out = scratch.file("result.parquet")
        run([*args, "--format", "parquet", "--out", out], ok=(0,))
        return pl.read_parquet(out)


# ---- simulate and grade -------------------------------------------------------------------


def evaluate(data: Data, judge: Any = None, *, grader: Any = None, judge_name: str | None = None, run_id: str | None = None, concurrency: int = 8, timeout: float | None = None, tools: Any = None, version: str | None = None, rubric: str | None = None, **options: Any) -> Scored:
    """Grades every row with `judge` (a function `row -> verdict`, or a spec string as
    `wai grade --judge` takes: `verify:...`, `sql:...`, `cmd:...`, `llm:MODEL`). A function runs
    on `concurrency` threads (a model judge makes `concurrency` calls at a time); one that
    raises, returns garbage or hangs past `timeout` marks only its rows (`judge_status`).
    Any other `wai grade` option goes by its name (`cache=`, `max_calls=`, `no_tools=True`,
    ...). Returns the scored rows and the grade's report."""
    if judge is not None and grader is not None:
        raise UsageError("evaluate() takes `judge` or `grader`, not both")
    judge = judge if judge is not None else grader
    if judge is None:
        raise UsageError("evaluate() needs a judge: a function row -> verdict, or a spec string")
    if isinstance(data, Simulation):
        data = data.rows
    with Scratch() as scratch:
        spec = _judge_spec(judge, scratch, concurrency, judge_name)
        model = isinstance(judge, str) and judge.startswith("llm:")
        # The reference's default: a fresh scoring run id per call (the engine's would be made
        # from the inputs' names, which for rows in memory are the same in every process).
        run_id = run_id or "score_" + uuid.uuid4().hex[:12]
        return _rows_out(["grade", *rows_spec(data, scratch), *flags(
            judge=spec, workers=_workers(judge, concurrency), timeout=timeout,
            run_id=run_id, judge_version=version, tools=_tools_file(tools, scratch), rubric=rubric,
            concurrency=concurrency if model else None, **options,
        )], scratch, cls=Scored)


def grade(rows: Data, judge: Any = None, **options: Any) -> Scored:
    """`evaluate` under the name the command line uses."""
    return evaluate(rows, judge, **options)


def simulate(
    agent: Any = "seeded",
    tools: Any = None,
    system_prompt: str = "",
    *,
    seeds: Sequence[str] | str | None = None,
    simulator: bool = False,
    mode: str | None = None,
    repeats: int | None = None,
    repeat_policy: str | None = None,
    reproducible: bool = True,
    checkpoint: str | os.PathLike[str] | None = None,
    budget: int | None = None,
    seed: int = 0,
    concurrency: int = 8,
    timeout: float | None = None,
    fault_rate: float | None = None,
    hard_share: float | None = None,
    phrasings: int | None = None,
    runs: int | None = None,
    tasks: Data | None = None,
    grade: Any = None,
    **options: Any,
) -> Simulation:
    """Simulates rollouts offline (`wai simulate`): asks from a covering grid over the tools
    and policy, played by `agent` against the mock tool world with scheduled faults.

    `agent` is a function `ask -> str | {"final_text", "steps"}` (it calls tools with
    `wai.call_tool(name, arguments)`, which the mock world answers, faults included), run on
    `concurrency` threads; or a spec string (`"seeded"`, `"seeded:0.35"`, `"cmd:..."`, a model).
    `simulator=True` is not offline (a model plays the user) and is refused here: give
    `agent` a model spec instead. The run is reproducible for any `agent` that is. Any other
    `wai simulate` option goes by its name (`user_model=`, `max_calls=`, `axis=[...]`, ...).
    """
    if simulator:
        raise UsageError("simulator=True needs a model to play the user; offline, the asks come from the grid (pass a `user_model` through the CLI)")
    del reproducible  # every run is: the same seed gives the same rows
    with Scratch() as scratch:
        if callable(agent):
            agent_spec = _served(AgentServer, agent, concurrency, _name_of(agent), scratch)
        else:
            agent_spec = str(agent)
        seeds_file = None
        if seeds is not None:
            items = [seeds] if isinstance(seeds, str) and not os.path.exists(seeds) else seeds
            seeds_file = os.fspath(items) if isinstance(items, (str, os.PathLike)) else scratch.write("seeds.jsonl", "".join(json.dumps({"prompt": s}) + "\n" for s in items))
        args = ["simulate", *flags(
            agent=agent_spec, tools=_tools_file(tools, scratch),
            policy=text_file(scratch, "policy.md", system_prompt) if system_prompt else None,
            seeds=seeds_file, mode=mode, repeats=repeats, repeat_policy=repeat_policy,
            checkpoint=os.fspath(checkpoint) if checkpoint else None, budget=budget, seed=seed,
            workers=_workers(agent, concurrency) or (_workers(grade, concurrency) if grade is not None else None),
            timeout=timeout, fault_rate=fault_rate,
            # A model agent makes `concurrency` calls at a time.
            concurrency=concurrency if isinstance(agent, str) and not agent.startswith(("seeded", "cmd:")) else None,
            hard_share=hard_share, phrasings=phrasings, runs=runs,
            tasks=rows_spec(tasks, scratch, "tasks")[0] if tasks is not None else None,
            grade=_judge_spec(grade, scratch, concurrency) if grade is not None else None,
            **options,
        )]
        got: Simulation = _rows_out(args, scratch, cls=Simulation)
        return got


# ---- tools --------------------------------------------------------------------------------

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Literal:
        return {"type": _JSON_TYPES.get(type(args[0]), "string"), "enum": list(args)}
    if origin in (list, tuple, Sequence, Iterable):
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    if origin in (dict, Mapping):
        return {"type": "object"}
    if origin is not None and len(args) == 1:  # Optional[X], X | None
        return _json_type(args[0])
    return {"type": _JSON_TYPES.get(annotation, "string")}


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Makes a typed function a tool: `fn.schema` is its OpenAI function schema (the signature's
    parameters, typed; the docstring's first paragraph as the description; parameters without
    a default required). The function stays callable as it was; pass it in `tools=`."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(f)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for p in inspect.signature(f).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            properties[p.name] = _json_type(hints.get(p.name, str))
            if p.default is p.empty:
                required.append(p.name)
        doc = inspect.getdoc(f) or ""
        f.schema = {  # type: ignore[attr-defined]
            "type": "function",
            "function": {
                "name": name or f.__name__,
                "description": description if description is not None else doc.split("\n\n")[0].strip(),
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        }
        return f

    return wrap(fn) if fn is not None else wrap
