"""Errors and diagnostics that name the input at fault.

``InputError`` stops a whole input (an unrecognised file, a stream that cannot be read);
``Skipped`` records one bad line inside an otherwise good input, which is kept going.
"""

from __future__ import annotations

from dataclasses import dataclass


class SpecobsError(Exception):
    """An error meant for the user: printed as one line, never as a traceback."""


class InputError(SpecobsError):
    """An input that cannot be read at all."""

    def __init__(self, source: str, why: str) -> None:
        super().__init__(f"{source}: {why}")
        self.source = source
        self.why = why


@dataclass(frozen=True)
class Skipped:
    """A line (or record) of an input that was skipped, and why."""

    source: str
    line: int | None
    why: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.why}"
