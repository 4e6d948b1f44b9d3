"""Errors are `wai.Error`s of the exit code's class, with the command line's messages."""

from __future__ import annotations

from pathlib import Path

import pytest

import wai
from conftest import FIXTURES


def test_a_bad_option_is_a_usage_error_before_any_work() -> None:
    with pytest.raises(wai.UsageError) as caught:
        wai.pass_at(FIXTURES / "example_scored.jsonl", n_boot=0)
    assert caught.value.code == 64
    assert "draws" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_missing_file_is_missing_input(tmp_path: Path) -> None:
    with pytest.raises(wai.MissingInput) as caught:
        wai.pass_at(tmp_path / "nope.jsonl")
    assert caught.value.code == 66
    assert "nope.jsonl" in str(caught.value)


def test_a_bad_row_names_its_line_and_field() -> None:
    rows = [{"prompt": "a", "reward": 1.0}, {"prompt": "b", "reward": "high"}]
    with pytest.raises(wai.DataError) as caught:
        wai.pass_at(rows)
    text = str(caught.value)
    assert caught.value.code == 65
    assert "line 2" in text and "reward" in text, text


def test_a_nan_in_a_dict_names_its_row() -> None:
    with pytest.raises(wai.DataError, match="line 2"):
        wai.pass_at([{"prompt": "a", "reward": 1.0}, {"prompt": "b", "reward": float("nan")}])


def test_something_that_is_not_rows_is_refused() -> None:
    with pytest.raises(wai.UsageError, match="not a row"):
        wai.pass_at([{"prompt": "a"}, 3])
    with pytest.raises(wai.UsageError, match="cannot read a"):
        wai.pass_at(3.5)


def test_a_hollow_run_reports_its_code() -> None:
    rows = [{"prompt": "a", "final_text": "x"}, {"prompt": "b", "final_text": "y"}]
    result = wai.pass_at(rows)
    assert result.code == 2
    assert result.n_groups == 0


def test_a_bad_value_in_arrow_rows_is_a_data_error_naming_the_column() -> None:
    import pyarrow as pa

    table = pa.table({"task_id": ["a", "a"], "rollout_id": ["r1", "r2"], "reward": [1.0, 1.5]})
    with pytest.raises(wai.DataError) as caught:
        wai.pass_at(table)
    text = str(caught.value)
    assert "reward" in text and "1.5" in text and "Parquet" not in text, text
    nulls = pa.table({"task_id": ["a", None], "rollout_id": ["r1", "r2"], "reward": [1.0, 0.0]})
    with pytest.raises(wai.DataError, match="task_id"):
        wai.pass_at(nulls)
