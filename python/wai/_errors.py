"""wai's errors as Python exceptions: one class per exit-code class of the command line."""

from __future__ import annotations

__all__ = [
    "Error",
    "GateFailed",
    "HollowRun",
    "UsageError",
    "DataError",
    "MissingInput",
    "Unavailable",
    "InternalError",
    "IOError_",
    "BudgetSpent",
    "from_code",
]


class Error(Exception):
    """Every error wai raises. `code` is the exit code the command line gives for it."""

    code: int = 1

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class GateFailed(Error):
    """A gate or check failed (exit 1): raised only where asked (`gate(..., check=True)`)."""

    code = 1


class HollowRun(Error):
    """The run is hollow (exit 2): no binary verdict to measure."""

    code = 2


class UsageError(Error, ValueError):
    """An option or argument is wrong (exit 64); nothing ran."""

    code = 64


class DataError(Error, ValueError):
    """Bad input data (exit 65): the message names the file or rows, line and field."""

    code = 65


class MissingInput(Error, FileNotFoundError):
    """An input does not exist (exit 66)."""

    code = 66


class Unavailable(Error):
    """A model endpoint cannot serve the run (exit 69)."""

    code = 69


class InternalError(Error):
    """A bug in wai (exit 70)."""

    code = 70


class IOError_(Error, OSError):
    """Reading or writing failed (exit 74)."""

    code = 74


class BudgetSpent(Error):
    """The model budget is spent (exit 75); run again with a larger one to go on."""

    code = 75


_BY_CODE: dict[int, type[Error]] = {
    c.code: c
    for c in (GateFailed, HollowRun, UsageError, DataError, MissingInput, Unavailable, InternalError, IOError_, BudgetSpent)
}


def from_code(code: int, message: str) -> Error:
    """The exception for exit code `code`."""
    return _BY_CODE.get(code, Error)(message, code)
