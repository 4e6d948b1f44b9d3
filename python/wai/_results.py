"""What the API returns: rows (Arrow, with Polars and dict views) and reports (printing as the
command line prints them, with `to_dict()`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars
    import pyarrow as pa

# pyarrow is imported when rows are made, not with `wai`: a call that reads a path and prints a
# report (wai.pass_at("runs/*.parquet")) starts as fast as the command line.


class Rows:
    """Rows, one rollout each, in wai's row schema: a `pyarrow.Table` underneath.

    `to_arrow()` is the table, `to_polars()` a Polars frame over the same buffers, `rows()` the
    rows as the reference's dicts (what `wai convert` writes as JSONL). Anything that reads the
    Arrow PyCapsule interface takes a `Rows` as it is (`polars.DataFrame(rows)`,
    `pyarrow.table(rows)`), and every wai function takes it as input.
    """

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    @classmethod
    def _read(cls, path: str) -> Rows:
        import pyarrow.parquet as pq

        return cls(pq.read_table(path))

    def to_arrow(self) -> pa.Table:
        """The rows as a `pyarrow.Table`."""
        return self._table

    def to_polars(self) -> polars.DataFrame:
        """The rows as a `polars.DataFrame` (zero-copy where Polars' types allow)."""
        import polars as pl

        frame = pl.from_arrow(self._table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts in the reference's row format (JSON values, ids included); records
        that are not rows (preference pairs) as they are."""
        from . import _core

        if "rollout_id" not in self._table.column_names:
            records: list[dict[str, Any]] = self._table.to_pylist()
            return records

        with _core.Scratch() as scratch:
            spec = _core.rows_spec(self._table, scratch)
            out = scratch.file("rows.jsonl")
            _core.run(["convert", *spec, "--out", out], ok=(0,))
            with open(out, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows())

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    def __repr__(self) -> str:
        return f"<wai.Rows: {self._table.num_rows} rows>"


class Report:
    """A command's report: prints as the command line prints it; `to_dict()` is the `report`
    of its `--json` envelope (docs/json.md); its keys read as attributes too."""

    def __init__(self, text: str, envelope: dict[str, Any], code: int = 0) -> None:
        self.text = text
        self.envelope = envelope
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data."""
        report = self.envelope.get("report", self.envelope)
        return report if isinstance(report, dict) else {"report": report}

    @property
    def warnings(self) -> list[Any]:
        """The warnings the report carries (empty when none)."""
        found = self.to_dict().get("warnings") or []
        return list(found) if isinstance(found, list) else [found]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("text", "envelope", "code", "rows", "pairs"):
            raise AttributeError(name)
        report = self.to_dict()
        if name in report:
            return report[name]
        raise AttributeError(f"{type(self).__name__} has no field `{name}` (fields: {', '.join(report)})")

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return "```text\n" + self.text + "\n```"


class PassAt(Report):
    """pass@1, pass^k and pass@k with their intervals and n. The overall line's fields
    (`pass_at_1`, `pass_at_1_ci`, `pass_pow_k`, `pass_at_k`, `k`, `n_tasks`, `note`, ...) read as
    attributes; `results` holds every slice's."""

    @property
    def overall(self) -> dict[str, Any]:
        results = self.to_dict().get("results") or [{}]
        first: dict[str, Any] = results[0]
        return first

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            overall = self.overall
            if name in overall:
                return overall[name]
        return super().__getattr__(name)


class WithRows(Report):
    """A report that also made rows (`rows`): a selection, a grade, a simulation, ..."""

    def __init__(self, text: str, envelope: dict[str, Any], rows: Rows, code: int = 0) -> None:
        super().__init__(text, envelope, code)
        self.rows = rows
        self.pairs: list[dict[str, Any]] = []

    def to_arrow(self) -> pa.Table:
        return self.rows.to_arrow()

    def to_polars(self) -> polars.DataFrame:
        return self.rows.to_polars()

    def __len__(self) -> int:
        return len(self.rows)


class Scored(WithRows):
    """Graded rows (`rows`) and the grade's report; measures read them directly."""

    def pass_at(self, **options: Any) -> PassAt:
        from . import pass_at

        return pass_at(self.rows, **options)

    def gate(self, floor: float, **options: Any) -> Report:
        from . import gate

        return gate(self.rows, floor, **options)


class Simulation(WithRows):
    """Simulated rollouts (`rows`, one per rollout) and the run's report."""
