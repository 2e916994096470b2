"""The readers: one per input format, each declared in its own module as ``READER`` (or
``READERS``) — a name, a sniff of the first bytes, and a read — and found here, so a new
format is one file in this package.

``detect(src)`` asks every reader's ``sniff`` in ``detect_order``; ``read_source(src, fmt)``
calls the reader of that format. ``FORMATS`` (what ``--input-format`` accepts) lists the
readers in ``list_order``, the event-file encodings under their common name ``events``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

import polars as pl

from specobs.errors import InputError, Skipped, SpecobsError
from specobs.ingest.scan import FoundLines, find_lines
from specobs.ingest.source import Source
from specobs.records import RunMetadata, SourceReport, TunerDecision, TuneResult

#: Reports bytes read, for a progress bar.
Progress = Callable[[int], None] | None


@dataclass
class Read:
    """What one input gives: ``windows`` rows (None: the input holds none), finished
    ``requests``, side records (the online tuner's decisions, run metadata, tune results), its
    :class:`SourceReport` and the lines skipped."""

    report: SourceReport
    skipped: list[Skipped] = field(default_factory=list)
    windows: pl.LazyFrame | None = None
    requests: pl.DataFrame | None = None
    decisions: list[TunerDecision] = field(default_factory=list)
    metadata: Sequence[RunMetadata] = ()
    tune_runs: list[TuneResult] = field(default_factory=list)
    bench: pl.DataFrame | None = None  # serving-benchmark results (``schema.BENCH``)


@dataclass(frozen=True)
class Reader:
    """One input format: ``sniff(head)`` names the format the first bytes are in (None: not
    this reader's), ``read(src, fmt, progress)`` reads it. ``formats``: every name it reads
    (``sniff`` answers one of them); ``family``: the one name ``--input-format`` lists for
    several readers (``events`` for both event-file encodings). ``binary``: sniffed before
    binary input is refused."""

    formats: tuple[str, ...]
    sniff: Callable[[bytes], str | None]
    read: Callable[[Source, str, Progress], Read]
    detect_order: int
    list_order: int
    family: str | None = None
    binary: bool = False


def line_reader(
    needles: Sequence[bytes], parse: Callable[[FoundLines, str], tuple[pl.DataFrame, list[Skipped]]]
) -> Callable[[Source, str, Progress], Read]:
    """The read of a text format whose few metric lines hold ``needles`` (a log, a scrape):
    find those lines without splitting every line, then ``parse`` them into windows."""

    def read(src: Source, fmt: str, progress: Progress = None) -> Read:
        found = find_lines(src, needles, progress=progress)
        frame, skipped = parse(found, src.name)
        skipped = found.skipped + skipped
        report = SourceReport(src.name, fmt, found.total_lines, frame.height, len(skipped))
        return Read(report, skipped, windows=frame.lazy())

    return read


#: Why JSON that is none of the formats is refused, and what to do (docs/formats.md).
JSON_HINT = (
    "JSON, but not a format specobs reads: a vLLM response needs metrics.speculative_decoding (start the server "
    "with --per-request-spec-decode-metrics summary), an event file the steps columns (docs/formats.md)"
)


@cache
def readers() -> tuple[Reader, ...]:
    """Every ``READER``/``READERS`` of this package's modules, in ``detect_order``."""
    package = importlib.import_module("specobs.ingest")
    found: list[Reader] = []
    for module in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"specobs.ingest.{module.name}")
        found += [r for r in (getattr(loaded, "READER", None), *getattr(loaded, "READERS", ())) if r is not None]
    return tuple(sorted(found, key=lambda r: r.detect_order))


def formats() -> tuple[str, ...]:
    """The names ``--input-format`` accepts (``load(fmt=)``), in ``list_order``."""
    listed: list[str] = []
    for reader in sorted(readers(), key=lambda r: r.list_order):
        for name in (reader.family,) if reader.family else reader.formats:
            if name not in listed:
                listed.append(name)
    return tuple(listed)


def _reader(fmt: str) -> Reader | None:
    return next((r for r in readers() if fmt in r.formats), None)


def detect(src: Source) -> str:
    """The format of ``src`` from its first bytes, or :class:`InputError` when unknown."""
    head = src.head
    if not head.strip():
        raise InputError(src.name, "empty input")
    binary = [r for r in readers() if r.binary]
    for reader in binary:
        found = reader.sniff(head)
        if found is not None:
            return found
    if _is_binary(head):
        raise InputError(src.name, "binary data, not a recognised log, scrape or event file")
    for reader in readers():
        if reader.binary:
            continue
        found = reader.sniff(head)
        if found is not None:
            return found
    if head.lstrip().startswith((b"{", b"[")):
        raise InputError(src.name, JSON_HINT)
    raise InputError(src.name, "not a recognised log, scrape or event file")


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    sample = head[:8192]
    text = sample.decode("utf-8", "replace")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c"))
    return odd > 0.05 * max(len(text), 1)


def check_format(fmt: str | None) -> None:
    """A format name ``load`` does not know is a :class:`SpecobsError` naming the known ones."""
    if fmt is not None and fmt not in formats() and _reader(fmt) is None:
        raise SpecobsError(f"unknown input format {fmt!r} (choose from {', '.join(formats())})")


def resolve(src: Source, fmt: str | None) -> str:
    """The format ``src`` is read as: detected, or ``fmt`` forced (a family: the member whose
    sniff answers, else its first)."""
    if fmt is None:
        return detect(src)
    family = [r for r in readers() if r.family == fmt]
    if family:
        return next((found for r in family if (found := r.sniff(src.head)) is not None), family[-1].formats[0])
    if _reader(fmt) is None:
        raise InputError(src.name, f"unknown format {fmt!r} (choose from {', '.join(formats())})")
    return fmt


def read_source(src: Source, fmt: str | None = None, *, progress: Progress = None) -> Read:
    """One opened input, in ``fmt`` or in the detected format."""
    resolved = resolve(src, fmt)
    reader = _reader(resolved)
    assert reader is not None  # resolve() raised otherwise
    return reader.read(src, resolved, progress)


__all__ = [
    "JSON_HINT", "Read", "Reader", "check_format", "detect", "formats", "line_reader", "read_source", "readers",
    "resolve",
]  # fmt: skip
