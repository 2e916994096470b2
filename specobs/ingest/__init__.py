"""Ingest: turn what operators already have into ``windows`` (and ``steps``) frames.

``load(paths)`` detects each input's format (``--input-format`` overrides), reads it with its
reader, and returns one :class:`Ingested` with every input's windows combined, each keeping its
source label, plus what was skipped and why. A format is one module with its ``READER``
(``registry``): ``events`` (specobs event files), ``request_rows`` (finished requests),
``metadata_files`` (run metadata), ``decisions`` (the online tuner's log), ``tune_result``
(``tune.json``), ``vllm_log`` (vLLM server logs), ``sglang_log`` (SGLang scheduler logs),
``prometheus_text`` (saved scrapes), ``prometheus_api`` (a live Prometheus), ``bench_serve``
(serving-benchmark results) and ``aiperf`` / ``guidellm`` (those two clients' results, read as
serving-benchmark results). Beside them: ``ingested`` (what was read and its parts), ``repeats``
(what is counted once: it returns what it drops, never changing ``Ingested``), ``source``
(plain, gzip and stdin inputs), ``scan`` and ``columns`` (helpers of the text readers) and
``specobs_metrics`` (the table of every family specobs exports, which the Prometheus reader and
the exporters share).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import polars as pl

from specobs import schema
from specobs.errors import InputError, Notice, SpecobsError
from specobs.ingest import bench_serve, events, prometheus_api
from specobs.ingest.ingested import FileSlice, Ingested, Part, counted_sources
from specobs.ingest.registry import JSON_HINT, check_format, detect, formats, read_source, resolve
from specobs.ingest.repeats import (
    Hashes,
    Repeats,
    Seen,
    drop_repeated_requests,
    drop_repeated_windows,
    narrow_repeat_hashes,
)
from specobs.ingest.source import Source, expand_paths, open_bytes, open_source
from specobs.records import SourceReport

#: Rows a report holds at once when Parquet event files hold more together (``load(part_rows=)``):
#: a larger file is read in slices of about equal size, each a part of its own. A part of this
#: many step rows holds about 220 MB and peaks near three times that while it is summed.
PART_ROWS = 1_000_000

T = TypeVar("T")


def path_list(paths: object) -> list[str]:
    """One path or many as a list (a string is one path, never its characters)."""
    if isinstance(paths, str | os.PathLike):
        return [os.fspath(paths)]
    if isinstance(paths, Sequence) and all(isinstance(p, str | os.PathLike) for p in paths):
        return [os.fspath(p) for p in paths]
    raise SpecobsError(f"expected a path or a list of paths, got {type(paths).__name__}")


def load(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    fmt: str | None = None,
    *,
    progress_factory: Callable[[Source], Callable[[int], None] | None] | None = None,
    uploads: Sequence[tuple[str, bytes]] = (),
    keep_going: bool = False,
    part_rows: int | None = None,
) -> Ingested:
    """Read every input in ``paths`` (one path or many: files, folders, ``-``) and ``uploads``
    (name, bytes) into one :class:`Ingested`.

    An explicitly named input that cannot be read raises :class:`InputError`, or with
    ``keep_going`` is listed in ``Ingested.failed`` while the rest is read; files met while
    walking a folder that are not a known format are listed as skipped instead.

    With ``part_rows``, Parquet event files holding more than that many rows together are not
    read here but checked in a first pass over a few columns (damage, repeated windows) and
    left to :meth:`Ingested.parts`, which reads them in parts of about ``part_rows`` rows.
    """
    check_format(fmt)
    result = Ingested()
    inputs: list[tuple[str, bool, bytes | None]] = [(n, e, None) for n, e in expand_paths(path_list(paths))]
    inputs += [(name, True, data) for name, data in uploads]
    large = _parquet_rows([n for n, _, data in inputs if data is None]) if part_rows is not None else {}
    if sum(large.values()) <= (part_rows or 0):
        large = {}
    plan: list[Part] = []  # with ``large``: the parts, in input order
    hashes = Hashes(sum(large.values()))

    def held(names: list[str]) -> None:
        """Close the run of inputs read whole since the last deferred file: a part of its own."""
        if names:
            plan.append(Part(windows=result.windows, names=set(names)))
            hashes.add(narrow_repeat_hashes(result.windows))
            result.windows = schema.empty(schema.WINDOWS).lazy()
            names.clear()

    held_names: list[str] = []
    seen = Seen()
    for name, explicit, data in inputs:
        first = seen.first(name, data)
        if first is not None:  # the same input twice would count every record twice
            result.notices.append(Notice(name, None, f"the same {first[1]} as {first[0]}: read once"))
            continue
        try:
            src = open_source(name) if data is None else open_bytes(name, data)
            kind = resolve(src, fmt)
            if name in large and kind == events.FORMAT_PARQUET and not src.compressed:
                for rows in _first_pass_rows(name, large[name]):  # a slice at a time: the pass's memory is one slice's
                    hashes.add(first_pass(src, narrow_repeat_hashes, rows))
                held(held_names)
                explicitly = {name} if explicit else set()
                plan += [
                    Part(files=[piece], names={name}, explicit=explicitly)
                    for piece in _slices(name, large[name], part_rows or 0)
                ]
                result.sources.append(SourceReport(name, kind, None, -1, 0))
                continue
            read = read_source(src, kind, progress=progress_factory(src) if progress_factory else None)
        except InputError as exc:
            result.unreadable(exc, explicit=explicit, keep_going=keep_going)
            continue
        if read.windows is not None:
            result.add(read.windows, read.report, read.skipped)
            held_names.append(read.report.name)
        else:  # side files: records, no windows; their notices kept apart, as Ingested.add does
            result.sources.append(read.report)
            result.skipped.extend(s for s in read.skipped if not isinstance(s, Notice))
            result.notices.extend(s for s in read.skipped if isinstance(s, Notice))
        if read.requests is not None:
            result.requests = pl.concat([result.requests, read.requests], how="vertical")
        result.decisions.extend(read.decisions)
        result.metadata.extend(read.metadata)
        result.tune_runs.extend((name, run) for run in read.tune_runs)
        if read.bench is not None:
            result.bench = pl.concat([result.bench, read.bench], how="vertical")
    if plan:
        result.keep_going = keep_going
        held(held_names)
        result.deferred = _packed(plan, part_rows or 0)
        result.repeats = Repeats.among(hashes.gathered())
    else:
        dropped = drop_repeated_windows(result.windows, result.sources)
        result.windows, result.sources = dropped.windows, dropped.sources(result.sources)
        result.notices.extend(dropped.notices)
    result.requests, repeated_requests = drop_repeated_requests(result.requests)
    result.notices.extend(repeated_requests)
    result.bench, repeated = bench_serve.drop_repeated_results(result.bench)
    result.notices.extend(repeated)
    result.decisions.sort(key=lambda d: d.ts)
    result.metadata.sort(key=lambda m: (m.ts is None, m.ts or 0.0))
    return result


def first_pass(src: Source, query: Callable[[pl.LazyFrame], T], rows: tuple[int, int] | None = None) -> T:
    """``query`` on :func:`events.scan_parquet_first_pass` of ``src`` (or of its ``rows``:
    offset, length); a damaged file raises :class:`InputError` naming it, as reading it whole would."""
    try:
        return query(events.scan_parquet_first_pass(src, rows))
    except InputError:
        raise
    except Exception as exc:  # polars raises ComputeError, OSError... for damaged pages
        raise InputError(src.name, f"unreadable Parquet file ({str(exc).splitlines()[0]})") from None


def sliced_files(ingested: Ingested) -> list[str]:
    """The files ``ingested`` reads in slices (each larger than a part), in input order."""
    return list(dict.fromkeys(p.name for part in ingested.deferred for p in part.files if p.sliced))


#: Rows a first pass over a large Parquet file reads at once (the columns it needs of them).
FIRST_PASS_ROWS = 1_000_000


def _first_pass_rows(name: str, rows: int) -> list[tuple[int, int]]:
    """The (offset, length) slices a first pass reads a file of ``rows`` rows in."""
    return [(piece.offset, piece.rows) for piece in _slices(name, rows, FIRST_PASS_ROWS)]


def first_pass_slices(ingested: Ingested) -> list[tuple[str, tuple[int, int]]]:
    """Each file ``ingested`` reads in parts as the (file, (offset, length)) slices a first pass
    reads it in, :data:`FIRST_PASS_ROWS` rows at a time, in input order."""
    rows: dict[str, int] = {}
    for part in ingested.deferred:
        for piece in part.files:
            rows[piece.name] = max(rows.get(piece.name, 0), piece.offset + piece.rows)
    return [(name, r) for name, total in rows.items() for r in _first_pass_rows(name, total)]


def _parquet_rows(names: Sequence[str]) -> dict[str, int]:
    """Rows of each Parquet file among ``names`` (from its footer; files that cannot say are left out)."""
    rows = {}
    for name in names:
        if name.endswith(".parquet") and os.path.isfile(name):
            try:
                rows[name] = int(pl.scan_parquet(name).select(pl.len()).collect().item())
            except Exception:  # a damaged file: the whole read names it
                continue
    return rows


def _slices(name: str, rows: int, part_rows: int) -> list[FileSlice]:
    """A file of ``rows`` rows whole, or in slices of at most ``part_rows`` rows of about equal size."""
    if rows <= part_rows or part_rows <= 0:
        return [FileSlice(name, rows)]
    count = -(-rows // part_rows)
    size = -(-rows // count)
    return [FileSlice(name, min(size, rows - start), start, sliced=True) for start in range(0, rows, size)]


def _packed(plan: list[Part], part_rows: int) -> list[Part]:
    """Consecutive parts of files packed into parts of at most ``part_rows`` rows (a larger
    file alone); the windows read whole stay parts of their own, in order."""
    packed: list[Part] = []
    for part in plan:
        last = packed[-1] if packed else None
        files = part.windows is None and last is not None and last.windows is None
        if files and last is not None and sum(f.rows for f in [*last.files, *part.files]) <= part_rows:
            last.files.extend(part.files)
            last.names |= part.names
            last.explicit |= part.explicit
            continue
        packed.append(part)
    return packed


def add_prometheus(
    ingested: Ingested, url: str, *, since: str = "6h", match: str = "", step: str | None = None
) -> Ingested:
    """``ingested`` with a Prometheus server's windows over the last ``since`` added (see
    :mod:`prometheus_api`): a new :class:`Ingested`, the one given is left as it was."""
    frame, notices = prometheus_api.read(url, since=since, match=match, step=step)
    report = SourceReport(f"{url} {match}".strip(), prometheus_api.FORMAT, None, frame.height, 0)
    return ingested.with_windows(frame.lazy(), report, notices)


#: Names accepted by ``--input-format`` (``load(fmt=)``): every file format detection finds
#: (docs/formats.md), ``events`` standing for both event-file encodings.
FORMATS = formats()

__all__ = [
    "FIRST_PASS_ROWS",
    "FORMATS",
    "JSON_HINT",
    "PART_ROWS",
    "FileSlice",
    "Ingested",
    "Part",
    "Repeats",
    "add_prometheus",
    "check_format",
    "counted_sources",
    "detect",
    "first_pass",
    "first_pass_slices",
    "load",
    "path_list",
    "read_source",
    "sliced_files",
]
