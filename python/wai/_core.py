"""How the API reaches the engine: inputs made into specs, commands run in this process."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _wai
from ._errors import Error, from_code

# A command run from Python leaves Ctrl-C to the interpreter (KeyboardInterrupt), not the
# binary's handler, which ends the process.
_wai.leave_signals_to_host()


class Scratch:
    """A temporary folder for one call: files the command reads or writes, removed at the end."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="wai-py-"))
        self.keep: list[Any] = []

    def file(self, name: str) -> str:
        return str(self.path / name)

    def write(self, name: str, text: str) -> str:
        path = self.path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *_: object) -> None:
        self.keep.clear()
        shutil.rmtree(self.path, ignore_errors=True)


def _label(data: object) -> str:
    kind = type(data)
    return f"rows ({kind.__module__.split('.')[0]}.{kind.__name__})"


def rows_spec(data: Any, scratch: Scratch, what: str = "rows") -> list[str]:
    """The specs a command takes for `data`: a path, glob or URL as it is; rows in memory
    registered (`memory:N`, kept alive by `scratch`)."""
    from ._results import Rows

    if isinstance(data, (str, os.PathLike)):
        return [os.fspath(data)]
    if isinstance(data, Rows):
        data = data.to_arrow()
    module = type(data).__module__.split(".")[0]
    if module == "polars":
        # Polars exports an all-null column with a buffer the Arrow C interface does not allow
        # (arrow-rs refuses it); its own pyarrow conversion is zero-copy and well-formed.
        if type(data).__name__ == "LazyFrame":
            data = data.collect()
        if hasattr(data, "to_arrow"):
            import polars as pl

            try:  # Polars' own layout (text as views): no copy on the way out
                data = data.to_arrow(compat_level=pl.CompatLevel.newest())
            except (AttributeError, TypeError):  # a Polars before compat levels
                data = data.to_arrow()
    if module == "pandas" and hasattr(data, "to_dict"):
        return _pandas_spec(data, scratch, what)
    if hasattr(data, "__arrow_c_stream__"):
        handle = _wai.register_arrow(data, _label(data))
        scratch.keep.append(handle)
        return [handle.spec]
    if isinstance(data, Mapping):
        data = [data]
    if isinstance(data, Iterable):
        items = list(data)
        if items and all(isinstance(i, (str, os.PathLike)) for i in items):
            return [os.fspath(i) for i in items]
        bad = next((i for i, r in enumerate(items) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise from_code(64, f"{what}: item {bad} is a {type(items[bad]).__name__}, not a row (a dict)")
        text = "".join(_row_line(r, i, what) for i, r in enumerate(items))
        handle = _wai.register_json(text.encode(), f"{what} (list of {len(items)} dicts)")
        scratch.keep.append(handle)
        return [handle.spec]
    raise from_code(
        64,
        f"{what}: cannot read a {type(data).__name__}: give a path, a glob, a URL, a list of dicts, "
        "or Arrow data (pyarrow, Polars, pandas)",
    )


def _row_line(row: Mapping[str, Any], i: int, what: str) -> str:
    try:
        return json.dumps(row, default=str, allow_nan=False) + "\n"
    except ValueError as e:  # NaN or infinity: JSON has no such number, and a row never holds one
        raise from_code(65, f"{what}: line {i + 1}: {e} (a missing value is None)") from None


def _pandas_spec(frame: Any, scratch: Scratch, what: str) -> list[str]:
    """A pandas frame: as Arrow when its columns convert (flat columns do, without a copy of
    numbers), else as the dicts its rows hold (columns of dicts and lists, as a frame made from
    the reference's rows has)."""
    import pyarrow as pa

    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        records = frame.astype(object).where(frame.notna(), None).to_dict("records")
        return rows_spec(records, scratch, what)
    handle = _wai.register_arrow(table, _label(frame))
    scratch.keep.append(handle)
    return [handle.spec]


def json_file(scratch: Scratch, name: str, value: Any) -> str:
    """`value` as a JSON file (a path is kept as it is)."""
    if isinstance(value, (str, os.PathLike)) and not str(value).lstrip().startswith(("[", "{")):
        return os.fspath(value)
    if isinstance(value, str):
        return scratch.write(name, value)
    return scratch.write(name, json.dumps(value, default=str))


def text_file(scratch: Scratch, name: str, value: str | os.PathLike[str]) -> str:
    """A path to a file as it is; any other text written to a file."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if "\n" not in value and len(value) < 4096 and Path(value).is_file():
        return value
    return scratch.write(name, value)


def flags(**options: Any) -> list[str]:
    """Command-line flags: `None` and `False` are left out, `True` is the bare flag, a list or
    tuple repeats the flag, anything else is its text."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, _text(value)]
    return out


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


class Outcome:
    """What a command gave: its text, its JSON envelope, its exit code, what it streamed."""

    def __init__(self, code: int, text: str, envelope: dict[str, Any], streamed: bytes) -> None:
        self.code = code
        self.text = text
        self.envelope = envelope
        self.streamed = streamed


def run(args: Sequence[str], *, ok: Sequence[int] = (0, 1, 2)) -> Outcome:
    """Runs `wai ARGS` in this process (with `--json` for the envelope and the text both)."""
    code, text, envelope, streamed, error = _wai.run(["wai", *args])
    if error is not None:
        raise from_code(code, error)
    if code not in ok:
        raise from_code(code, text or f"wai {args[0]} exited with {code}")
    parsed = json.loads(envelope) if envelope else {}
    return Outcome(code, text, parsed, bytes(streamed))


__all__ = ["Error", "Scratch", "flags", "json_file", "rows_spec", "run", "text_file", "Outcome", "Sequence"]
