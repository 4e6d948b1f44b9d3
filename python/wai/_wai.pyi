"""The extension module (Rust, `python/src/lib.rs`): the engine's way in for the package."""

from typing import Any, final

def run(argv: list[str]) -> tuple[int, str, str, bytes, str | None]:
    """Runs one command line in this process: (exit code, text, JSON envelope, stdout, error)."""

def register_arrow(data: Any, display: str) -> Rows:
    """Arrow data (`__arrow_c_stream__`) held in memory as rows, under a `memory:N` spec."""

def register_json(text: bytes, display: str) -> Rows:
    """Rows given as JSON Lines held in memory, under a `memory:N` spec."""

def register_program(server: Any, name: str) -> Program:
    """An object with `serve(lines, replies)` served to the engine's worker pools."""

def leave_signals_to_host() -> None:
    """Ctrl-C stays the interpreter's."""

def version() -> str:
    """The engine's version."""

@final
class Rows:
    """Rows in memory, registered while this lives."""

    @property
    def spec(self) -> str: ...
    def __len__(self) -> int: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def buffer_addresses(self) -> list[int]: ...

@final
class RequestLines:
    def next_batch(self, timeout: float) -> list[str] | None: ...

@final
class ReplyLines:
    def send(self, line: str) -> bool: ...

@final
class Program:
    @property
    def command(self) -> str: ...
