"""Errors and diagnostics that name the input at fault.

``InputError`` stops a whole input (an unrecognised file, a stream that cannot be read);
``Skipped`` records one bad line inside an otherwise good input, which is kept going.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Exit statuses of the ``specobs`` command: the one table the CLI uses and docs/cli.md shows.
EXIT_OK = 0
EXIT_NOTHING_FOUND = 1
EXIT_USAGE = 2
EXIT_REGRESSION = 3
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done (compare: improvement, no significant change, configuration changed or no verdict possible)",
    EXIT_NOTHING_FOUND: "nothing to report or tune: the inputs were read but hold no steps, intervals or finished "
    "requests (a log without metrics lines); recommend also when nothing was drafted (a plain engine's input alone) "
    "or the input holds finished requests alone. A report of a plain engine's input alone exits 0 and says that it "
    "holds no speculative decoding",
    EXIT_USAGE: "bad usage or an input that cannot be read at all (one line on stderr names it)",
    EXIT_REGRESSION: "compare only: B is slower than A beyond noise (or, without timing and with the same "
    "configuration, has a lower acceptance length)",
    EXIT_INTERNAL: "internal error: a bug in specobs, not bad input (SPECOBS_DEBUG=1 prints the traceback)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


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


@dataclass(frozen=True)
class Notice(Skipped):
    """Not a skipped record: something assumed about an input that was read anyway, and where
    (a counter reset, a baseline taken, a stream cut short). Parsers return notices with their
    skipped lines; ``Ingested.add`` keeps them apart, so they are never counted as skipped."""
