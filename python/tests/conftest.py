"""Fixtures shared by the Python package's tests: the repository's own test files."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
