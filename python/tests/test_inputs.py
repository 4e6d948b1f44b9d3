"""Rows in any shape give the same results; Arrow already in the row schema is not copied."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wai
from wai import _core, _wai
from conftest import FIXTURES

SCORED = FIXTURES / "example_scored.jsonl"


def reference_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SCORED.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rows") / "scored.parquet"
    table = wai.read(SCORED).to_arrow()
    pq.write_table(table, path)
    return path


def shapes(parquet: Path) -> dict[str, Callable[[], Any]]:
    """Each input shape, made fresh for each use (a reader is read once)."""
    table = pq.read_table(parquet)
    return {
        "jsonl path": lambda: str(SCORED),
        "parquet path": lambda: parquet,
        "glob": lambda: str(parquet.parent / "*.parquet"),
        "file URL": lambda: parquet.as_uri(),
        "list of dicts": reference_rows,
        "pyarrow.Table": lambda: table,
        "RecordBatchReader": lambda: pa.RecordBatchReader.from_batches(table.schema, table.to_batches()),
        "polars.DataFrame": lambda: pl.read_parquet(parquet),
        "polars.LazyFrame": lambda: pl.scan_parquet(parquet),
        "pandas.DataFrame": lambda: pd.DataFrame(reference_rows()),
        "wai.Rows": lambda: wai.read(SCORED),
    }


def test_every_input_shape_gives_the_same_results(parquet: Path) -> None:
    want = wai.pass_at(SCORED).to_dict()
    want_scan = wai.hack_scan(SCORED, n_perm=20).to_dict()
    for name, make in shapes(parquet).items():
        got = wai.pass_at(make()).to_dict()
        assert got["results"] == want["results"], name
        assert wai.hack_scan(make(), n_perm=20).to_dict()["features"] == want_scan["features"], name
        # A command that streams rows from files reads them too.
        assert len(wai.select(make(), mode="sft", target=10).rows) == len(wai.select(SCORED, mode="sft", target=10).rows), name


def test_rows_made_from_the_reference_dicts_by_another_library_are_read_as_the_dicts(parquet: Path) -> None:
    # A frame built from the reference's dicts has no ids: its rows are read as JSON rows are.
    frame = pl.DataFrame([{"task_id": None, **r} for r in reference_rows()]).drop("task_id")
    assert wai.pass_at(frame).to_dict()["results"] == wai.pass_at(SCORED).to_dict()["results"]
    pandas = pd.DataFrame({"prompt": ["a", "a", "b", "b"], "final_text": ["x", "y", "z", "w"], "reward": [1.0, 0.0, 1.0, 1.0]})
    assert wai.pass_at(pandas, min_k=2).pass_at_1 == 0.75


def addresses(table: pa.Table) -> list[int]:
    """Where every non-empty buffer of every column starts, children included."""
    return [buf.address for column in table.columns for chunk in column.chunks for buf in chunk.buffers() if buf is not None and buf.size > 0]


@pytest.mark.parametrize("written_by", ["wai", "pyarrow"])
def test_a_pyarrow_table_in_the_row_schema_is_not_copied(parquet: Path, tmp_path: Path, written_by: str) -> None:
    # As wai wrote it, and as pyarrow writes it back (lists' items named `element`).
    path = parquet
    if written_by == "pyarrow":
        path = tmp_path / "again.parquet"
        pq.write_table(pq.read_table(parquet), path)
    table = pq.read_table(path)
    handle = _wai.register_arrow(table, "rows (pyarrow.Table)")
    theirs = set(addresses(table))
    ours = handle.buffer_addresses()
    assert len(ours) > 50, "the rows have buffers"
    # Every buffer wai holds is one of the table's: nothing was copied (a validity buffer of a
    # column without nulls is dropped on import, not copied).
    made = [a for a in ours if a not in theirs]
    assert not made, f"{len(made)} of {len(ours)} buffers are copies"
    # The big ones are all there: every text column's values.
    for name in ("prompt", "final_text", "rollout_id"):
        assert table.column(name).chunks[0].buffers()[2].address in ours, name
    # And the rows come back out the same way: a pyarrow table over the same buffers.
    back = pa.table(handle)
    assert back.column("final_text").chunks[0].buffers()[2].address in theirs


def test_rows_out_have_arrow_polars_and_dict_views() -> None:
    rows = wai.read(SCORED)
    assert isinstance(rows.to_arrow(), pa.Table)
    frame = rows.to_polars()
    assert isinstance(frame, pl.DataFrame) and frame.height == len(rows)
    dicts = rows.rows()
    assert [d["prompt"] for d in dicts] == [r["prompt"] for r in reference_rows()]
    assert pl.DataFrame(rows).height == len(rows)  # the PyCapsule interface


def test_sql_takes_every_shape_and_returns_polars() -> None:
    got = wai.sql("SELECT task_id, avg(reward) AS pass_rate FROM scored GROUP BY task_id ORDER BY task_id", scored=reference_rows())
    assert isinstance(got, pl.DataFrame)
    want = wai.sql("SELECT task_id, avg(reward) AS pass_rate FROM scored GROUP BY task_id ORDER BY task_id", scored=SCORED)
    assert got.equals(want)
    assert got.height > 0


def test_rows_in_memory_are_freed_after_a_call() -> None:
    scratch = _core.Scratch()
    spec = _core.rows_spec(reference_rows(), scratch)[0]
    assert spec.startswith("memory:")
    with scratch:
        pass
    with pytest.raises(wai.UsageError, match="no longer registered"):
        wai.pass_at(spec)
