"""Ingest: turn what operators already have into ``windows`` (and ``steps``) frames.

``load(paths)`` detects each input's format (``--format`` overrides), parses it, and returns
one :class:`Ingested` with every input's windows combined, each keeping its source label,
plus what was skipped and why. Parsers live one per source format in this package.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import polars as pl

from specobs import schema
from specobs.errors import InputError, Notice, Skipped, SpecobsError
from specobs.ingest import decisions, events, metadata, prometheus_text, requests, sglang_log, tune_result, vllm_log
from specobs.ingest.columns import reference_year
from specobs.ingest.scan import find_lines
from specobs.ingest.source import Source, expand_paths, open_bytes, open_source
from specobs.records import RunMetadata, SourceReport, TunerDecision, TuneResult

#: Rows a report holds at once when Parquet event files hold more together (``load(part_rows=)``):
#: a part of this many step rows peaks near 1.4 GB while it is reduced to sums (a larger file
#: is a part alone: 10M rows, 2.9 GB).
PART_ROWS = 4_000_000

T = TypeVar("T")

#: Names accepted by ``--input-format`` (``load(fmt=)``): every file format detection finds
#: (docs/formats.md), ``events`` standing for both event-file encodings.
FORMATS = (
    vllm_log.FORMAT, sglang_log.FORMAT, prometheus_text.FORMAT, "events", *requests.FORMATS, decisions.FORMAT,
    metadata.FORMAT, tune_result.FORMAT,
)  # fmt: skip
#: Also accepted: the two encodings ``events`` stands for, as ``sources[].format`` names them.
_EVENT_FORMATS = (events.FORMAT_JSONL, events.FORMAT_PARQUET)

#: Why JSON that is none of the formats is refused, and what to do (docs/formats.md).
JSON_HINT = (
    "JSON, but not a format specobs reads: a vLLM response needs metrics.speculative_decoding (start the server "
    "with --per-request-spec-decode-metrics summary), an event file the steps columns (docs/formats.md)"
)
_VLLM_PREFIX = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d")
_SGLANG_PREFIX = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z_]+\d+)*\] ")
_PROM_LINE = re.compile(rb"^(?:# (?:HELP|TYPE|EOF|UNIT)\b.*|[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?\s+\S+(?:\s+\d+)?)$")
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass
class Part:
    """One part of an input read in parts: consecutive Parquet event files (``files``: name,
    rows), read when needed, or the ``windows`` of the inputs read whole between them."""

    files: list[tuple[str, int]] = field(default_factory=list)
    windows: pl.LazyFrame | None = None
    #: The sources whose windows the part holds.
    names: set[str] = field(default_factory=set)
    #: Files named on the command line (not met in a folder): one that cannot be read raises.
    explicit: set[str] = field(default_factory=set)


@dataclass
class Ingested:
    """Everything read from a set of inputs."""

    windows: pl.LazyFrame = field(default_factory=lambda: schema.empty(schema.WINDOWS).lazy())
    sources: list[SourceReport] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    #: Inputs that could not be read at all (only with ``keep_going``; otherwise they raise).
    failed: list[InputError] = field(default_factory=list)
    #: What was assumed while reading (a counter reset, a baseline): not skipped, but said.
    notices: list[Notice] = field(default_factory=list)
    #: The online tuner's decision log (``SPECOBS_TUNE``), oldest first.
    decisions: list[TunerDecision] = field(default_factory=list)
    #: ``specobs tune`` results read back (``tune.json``).
    tune_runs: list[tuple[str, TuneResult]] = field(default_factory=list)
    #: Finished requests (``schema.REQUESTS``): capture request files, server responses, offline outputs.
    requests: pl.DataFrame = field(default_factory=lambda: schema.empty(schema.REQUESTS))
    #: Run metadata, one record per engine (read beside the event files), oldest first.
    metadata: list[RunMetadata] = field(default_factory=list)
    #: Parquet event files too large to hold together (``load(..., part_rows=N)``), with the
    #: windows read whole between them: the parts :meth:`parts` yields, in input order.
    deferred: list[Part] = field(default_factory=list)
    #: With ``deferred``: the repeated windows of the whole input, dropped part by part.
    repeats: Repeats | None = None
    #: With ``deferred``: whether a file found unreadable while its part is read is listed
    #: (``load(..., keep_going=True)``) instead of raising.
    keep_going: bool = False
    #: The parts (by index in ``deferred``) whose skipped rows, notices and counts are recorded.
    _recorded: set[int] = field(default_factory=set, repr=False)

    def parts(self) -> Iterator[pl.LazyFrame]:
        """The windows in parts that each fit in memory, in input order: without ``deferred``,
        :attr:`windows` whole; with it, each :class:`Part`. A part of files is read when asked
        for; the first time, its skipped rows, notices, repeats dropped and window counts go
        into this object (read again, the same parts come, and nothing is recorded twice)."""
        if not self.deferred:
            yield self.windows
            return
        # Repeats are found afresh on every reading, in input order: each yields the same parts.
        repeats = Repeats(self.repeats.suspects) if self.repeats is not None else None
        for index, part in enumerate(self.deferred):
            record = index not in self._recorded
            self._recorded.add(index)
            if part.windows is not None:
                whole = self._counted(part.windows, part.names, repeats, record=record)
            else:
                frames = []
                for name, _ in part.files:
                    try:
                        frame, report, skipped = read_source(open_source(name), "events")
                    except InputError as exc:  # damage the first pass did not read
                        if record:
                            self.unreadable(exc, explicit=name in part.explicit, keep_going=self.keep_going)
                        continue
                    if record:
                        at = next(i for i, s in enumerate(self.sources) if s.name == name)
                        self.sources[at] = replace(self.sources[at], skipped=report.skipped)
                        self.skipped.extend(skipped)
                    frames.append(frame)
                if not frames:
                    continue
                whole = self._counted(pl.concat(frames, how="vertical_relaxed"), part.names, repeats, record=record)
                del frames, frame
            yield whole
            del whole  # before the next part is read

    def unreadable(self, exc: InputError, *, explicit: bool, keep_going: bool) -> None:
        """An input that cannot be read (when loaded, or a deferred file when its part is read):
        an explicit one raises (or with ``keep_going`` is listed as failed), a file met while
        walking a folder is listed as skipped; either way it is no source."""
        if explicit and not keep_going:
            raise exc
        self.sources = [s for s in self.sources if s.name != exc.source]
        if explicit:
            self.failed.append(exc)
        else:
            self.skipped.append(Skipped(exc.source, None, exc.why))

    def _counted(
        self, windows: pl.LazyFrame, names: set[str], repeats: Repeats | None, *, record: bool
    ) -> pl.LazyFrame:
        """``windows`` read, its repeats dropped, and (``record``) the notices of those and the
        window counts of its sources ``names`` that were not counted yet (event files) set."""
        frame = windows.collect().lazy()
        if repeats is not None:
            frame = repeats.drop(frame, self if record else None).collect().lazy()
        if record:
            counts = dict(frame.group_by("source").len().collect().iter_rows())
            self.sources = [
                replace(s, windows=counts.get(s.name, 0)) if s.name in names and s.windows < 0 else s
                for s in self.sources
            ]
        return frame

    def add(self, frame: pl.LazyFrame, report: SourceReport, skipped: Sequence[Skipped] = ()) -> None:
        """Append one input's windows (a part of their own once the input is read in parts);
        its notices are kept apart from its skipped lines."""
        if self.deferred:
            self.deferred.append(Part(windows=frame, names={report.name}))
        else:
            # Relaxed: a Parquet input holds its labels as categoricals, a log as text (text wins).
            self.windows = pl.concat([self.windows, frame], how="vertical_relaxed") if self.sources else frame
        notices = [s for s in skipped if isinstance(s, Notice)]
        if notices:
            report = replace(report, skipped=max(report.skipped - len(notices), 0))
        self.sources.append(report)
        self.skipped.extend(s for s in skipped if not isinstance(s, Notice))
        self.notices.extend(notices)


def detect(src: Source) -> str:
    """The format of ``src`` from its first bytes, or :class:`InputError` when unknown."""
    head = src.head
    if not head.strip():
        raise InputError(src.name, "empty input")
    if head.startswith(events.PARQUET_MAGIC):
        return events.FORMAT_PARQUET
    if _is_binary(head):
        raise InputError(src.name, "binary data, not a recognised log, scrape or event file")
    if events.looks_like_jsonl(head):
        return events.FORMAT_JSONL
    kind = requests.looks_like_requests(head)
    if kind is not None:
        return kind
    if decisions.looks_like_decisions(head):
        return decisions.FORMAT
    if metadata.looks_like_metadata(head):
        return metadata.FORMAT
    if tune_result.looks_like_tune_result(head):
        return tune_result.FORMAT
    lines = [_ANSI.sub(b"", raw).strip() for raw in head.split(b"\n")[:-1] or [head]]
    lines = [line for line in lines if line][:500]
    if lines and b"vllm:" in head:
        exposition = sum(1 for line in lines if _PROM_LINE.match(line))
        if exposition >= 0.8 * len(lines):
            return prometheus_text.FORMAT
    if any(needle in head for needle in vllm_log.NEEDLES[:4]) or _VLLM_PREFIX.search(head):
        return vllm_log.FORMAT
    if b"Decode batch" in head or _SGLANG_PREFIX.search(head):
        return sglang_log.FORMAT
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


def read_source(
    src: Source, fmt: str | None = None, *, progress: Callable[[int], None] | None = None
) -> tuple[pl.LazyFrame, SourceReport, list[Skipped]]:
    """Windows from one opened input, in ``fmt`` or in the detected format."""
    detected = detect(src) if fmt is None else _resolve_format(src, fmt)
    if detected == events.FORMAT_PARQUET:
        steps, skipped = events.read_parquet_checked(src)
        windows = events.steps_to_windows(steps, src.name, detected)
        return windows, SourceReport(src.name, detected, None, -1, len(skipped)), skipped
    if detected == events.FORMAT_JSONL:
        steps, skipped = events.read_jsonl(src)
        windows = events.steps_to_windows(steps, src.name, detected)
        return windows, SourceReport(src.name, detected, None, -1, len(skipped)), skipped
    if detected == vllm_log.FORMAT:
        found = find_lines(src, vllm_log.NEEDLES, fields=vllm_log.scan_fields(src.head), progress=progress)
        mtime = src.path.stat().st_mtime if src.path is not None else None
        frame, skipped = vllm_log.parse(found, src.name, year=reference_year(mtime), reference=mtime)
        metadata = tuple(vllm_log.run_metadata(found, src.name))
    elif detected == sglang_log.FORMAT:
        metadata = ()
        found = find_lines(src, sglang_log.NEEDLES, progress=progress)
        frame, skipped = sglang_log.parse(found, src.name)
    else:
        metadata = ()
        found = find_lines(src, prometheus_text.NEEDLES, progress=progress)
        frame, skipped = prometheus_text.parse(found, src.name)
    skipped = found.skipped + skipped
    report = SourceReport(src.name, detected, found.total_lines, frame.height, len(skipped), metadata)
    return frame.lazy(), report, skipped


def check_format(fmt: str | None) -> None:
    """A format name ``load`` does not know is a :class:`SpecobsError` naming the known ones."""
    if fmt is not None and fmt not in FORMATS and fmt not in _EVENT_FORMATS:
        raise SpecobsError(f"unknown input format {fmt!r} (choose from {', '.join(FORMATS)})")


def _resolve_format(src: Source, fmt: str) -> str:
    """The format ``src`` is read as when ``fmt`` is forced (``events``: its encoding)."""
    if fmt == "events":
        if src.head.startswith(events.PARQUET_MAGIC):
            return events.FORMAT_PARQUET
        return events.FORMAT_JSONL
    if fmt not in FORMATS and fmt not in _EVENT_FORMATS:
        raise InputError(src.name, f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    return fmt


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
    hashes = _Hashes(sum(large.values()))

    def held(names: list[str]) -> None:
        """Close the run of inputs read whole since the last deferred file: a part of its own."""
        if names:
            plan.append(Part(windows=result.windows, names=set(names)))
            hashes.add(narrow_repeat_hashes(result.windows))
            result.windows = schema.empty(schema.WINDOWS).lazy()
            names.clear()

    held_names: list[str] = []
    seen = _Seen()
    for name, explicit, data in inputs:
        first = seen.first(name, data)
        if first is not None:  # the same input twice would count every record twice
            result.notices.append(Notice(name, None, f"the same {first[1]} as {first[0]}: read once"))
            continue
        try:
            src = open_source(name) if data is None else open_bytes(name, data)
            kind = detect(src) if fmt is None else _resolve_format(src, fmt)
            if name in large and kind == events.FORMAT_PARQUET and not src.compressed:
                hashes.add(first_pass(src, narrow_repeat_hashes))
                held(held_names)
                plan.append(Part(files=[(name, large[name])], names={name}, explicit={name} if explicit else set()))
                result.sources.append(SourceReport(name, kind, None, -1, 0))
                continue
            if kind in (decisions.FORMAT, metadata.FORMAT):  # side files: records, no windows
                _read_side_file(result, name, kind, src)
                continue
            if kind in requests.FORMATS:
                rows, skipped, lines = requests.read(src, kind)
                result.requests = pl.concat([result.requests, rows], how="vertical")
                report = SourceReport(name, kind, lines, 0, 0)
                result.add(schema.empty(schema.WINDOWS).lazy(), replace(report, skipped=len(skipped)), skipped)
                continue
            if kind == tune_result.FORMAT:
                result.tune_runs.append((name, tune_result.read(src)))
                result.sources.append(SourceReport(name, tune_result.FORMAT, None, 0, 0))
                continue
            progress = progress_factory(src) if progress_factory else None
            frame, report, skipped = read_source(src, kind, progress=progress)
        except InputError as exc:
            result.unreadable(exc, explicit=explicit, keep_going=keep_going)
            continue
        result.add(frame, report, skipped)
        result.metadata.extend(report.metadata)
        held_names.append(report.name)
    if plan:
        result.keep_going = keep_going
        held(held_names)
        result.deferred = _packed(plan, part_rows or 0)
        result.repeats = Repeats.among(hashes.gathered())
    else:
        _drop_repeated_windows(result)
    _drop_repeated_requests(result)
    result.decisions.sort(key=lambda d: d.ts)
    result.metadata.sort(key=lambda m: (m.ts is None, m.ts or 0.0))
    return result


def first_pass(src: Source, query: Callable[[pl.LazyFrame], T]) -> T:
    """``query`` on :func:`events.scan_parquet_first_pass` of ``src``; a damaged file raises
    :class:`InputError` naming it, as reading it whole would."""
    try:
        return query(events.scan_parquet_first_pass(src))
    except InputError:
        raise
    except Exception as exc:  # polars raises ComputeError, OSError... for damaged pages
        raise InputError(src.name, f"unreadable Parquet file ({str(exc).splitlines()[0]})") from None


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


def _packed(plan: list[Part], part_rows: int) -> list[Part]:
    """Consecutive parts of files packed into parts of at most ``part_rows`` rows (a larger
    file alone); the windows read whole stay parts of their own, in order."""
    packed: list[Part] = []
    for part in plan:
        last = packed[-1] if packed else None
        files = part.windows is None and last is not None and last.windows is None
        if files and last is not None and sum(n for _, n in [*last.files, *part.files]) <= part_rows:
            last.files.extend(part.files)
            last.names |= part.names
            last.explicit |= part.explicit
            continue
        packed.append(part)
    return packed


#: What makes two finished-request rows one request read twice (its capture row and its saved output).
REQUEST_REPEAT_KEY = (
    "request_key", "num_prompt_tokens", "num_output_tokens", "num_spec_steps", "num_draft_tokens",
    "num_accepted_tokens", "acceptance_histogram",
)  # fmt: skip


def _drop_repeated_requests(result: Ingested) -> None:
    """Count once a request whose row repeats an earlier one (same key and numbers): the
    capture's row and the saved output of the same request, or a file read twice."""
    rows = result.requests
    if rows.height < 2 or rows.get_column("request_key").n_unique() == rows.height:
        return
    first = rows.select(pl.struct(REQUEST_REPEAT_KEY).is_first_distinct()).to_series()
    repeats = int((~first).sum())
    if repeats:
        result.requests = rows.filter(first)
        result.notices.append(
            Notice("requests", None, f"{repeats} finished request(s) read twice (same request id and counts, e.g. "
                   "captured and saved as outputs): counted once")
        )  # fmt: skip


def _read_side_file(result: Ingested, name: str, kind: str, src: Source) -> None:
    """A capture's side file (the tuner's decisions, run metadata): its records, no windows."""
    if kind == decisions.FORMAT:
        found, skipped, lines = decisions.read(src)
        result.decisions.extend(found)
    else:
        records, skipped, lines = metadata.read(src)
        result.metadata.extend(records)
    result.sources.append(SourceReport(name, kind, lines, 0, len(skipped)))
    result.skipped.extend(skipped)


#: What makes two windows the same record read twice: their times, labels and counts. The
#: source is left out on purpose (a copy under another name repeats the same records).
REPEAT_KEY = (
    "start_ts", "end_ts", "engine", "model", "method", "draft_model", "batch_size", "num_spec_tokens",
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_generated_tokens", "step_seconds",
)  # fmt: skip


#: What a repeat must share with its original before the full comparison (:data:`REPEAT_KEY`).
_NARROW_REPEAT_KEY = ("end_ts", "engine", "num_draft_tokens", "num_accepted_tokens")


def narrow_repeat_hashes(windows: pl.LazyFrame) -> pl.Series:
    """One 64-bit hash per timed window of the columns a repeat shares with its original first
    (engines of one server print in the same second, so a shared end time alone says little)."""
    return (
        windows.filter(pl.col("end_ts").is_not_null())
        .select(pl.struct(_NARROW_REPEAT_KEY).hash().alias("_narrow"))
        .collect()
        .to_series()
    )


class _Hashes:
    """The narrow hashes of every window of an input read in parts, gathered into one array as
    each file's first pass gives them (8 bytes a window: 800 MB for 100M windows, the first
    pass's peak; no copy of them all is ever made)."""

    def __init__(self, expected: int) -> None:
        self._values = np.empty(expected, np.uint64)
        self._filled = 0

    def add(self, hashes: pl.Series) -> None:
        more = hashes.to_numpy()
        end = self._filled + len(more)
        if end > len(self._values):  # more than the footers said (windows read whole): grow
            grown = np.empty(max(end, len(self._values) * 5 // 4), np.uint64)
            grown[: self._filled] = self._values[: self._filled]
            self._values = grown
        self._values[self._filled : end] = more
        self._filled = end

    def gathered(self) -> np.ndarray:
        return self._values[: self._filled]


class Repeats:
    """Windows that repeat an earlier one exactly (a file concatenated with itself, two
    overlapping copies of a log): same times, labels and counts. Windows without a time cannot
    be told apart from a genuine repeat and are all kept.

    Found part by part, in input order (:meth:`drop`), among windows whose narrow hash
    (:func:`narrow_repeat_hashes`) occurs more than once in the whole input (``suspects``):
    the full comparison runs on those alone, and only the first of each repeat is kept."""

    def __init__(self, suspects: pl.Series) -> None:
        self.suspects = suspects
        self._process = pl.col("source").cast(pl.String).str.extract(r" (\[[^\[\]]*\])$").alias("_process")
        self._key = [*REPEAT_KEY, "_process"]
        self._firsts: pl.DataFrame | None = None

    @classmethod
    def among(cls, values: np.ndarray) -> Repeats | None:
        """Repeats of the windows whose narrow hashes are ``values`` (sorted in place), or None
        when no hash occurs twice."""
        values.sort()
        twice = values[1:][values[1:] == values[:-1]]
        del values
        return cls(pl.Series("_narrow", np.unique(twice), pl.UInt64)) if twice.size else None

    def drop(self, windows: pl.LazyFrame, result: Ingested | None) -> pl.LazyFrame:
        """``windows`` (the next part) without the repeats of windows seen so far; each source
        that repeats another gets a notice in ``result`` (unless None) naming the first
        repeated line and where it was read first, and its window count lowered."""
        numbered = windows.with_row_index("_row")
        narrow = pl.struct(_NARROW_REPEAT_KEY).hash()
        candidates = (
            numbered.filter(pl.col("end_ts").is_not_null() & narrow.is_in(self.suspects.implode()))
            .select("_row", self._process, *REPEAT_KEY, "source", "source_line")
            # Labels as text: a log's and a Parquet file's (categorical) compare, part after part.
            .with_columns(pl.col(pl.Categorical).cast(pl.String))
            .collect()
            .with_columns(repeat=~pl.struct(self._key).is_first_distinct())
        )
        if self._firsts is not None and candidates.height:
            seen = candidates.join(self._firsts.select(self._key), on=self._key, how="semi", nulls_equal=True)
            candidates = candidates.with_columns(repeat=pl.col("repeat") | pl.col("_row").is_in(seen["_row"].implode()))
        firsts = candidates.filter(~pl.col("repeat")).select(
            *self._key, first_source="source", first_line="source_line"
        )
        self._firsts = firsts if self._firsts is None else pl.concat([self._firsts, firsts], how="vertical_relaxed")
        repeats = candidates.filter("repeat")
        if repeats.is_empty():
            return windows
        if result is not None:
            self._tell(repeats, result)
        return numbered.filter(~pl.col("_row").is_in(repeats["_row"].implode())).drop("_row")

    def _tell(self, repeats: pl.DataFrame, result: Ingested) -> None:
        assert self._firsts is not None
        named = repeats.join(self._firsts, on=self._key, how="left", nulls_equal=True)
        groups = named.group_by("source", "first_source", maintain_order=True).agg(
            n=pl.len(), line=pl.col("source_line").min(), first_line=pl.col("first_line").min()
        )
        for source, first_source, n, line, first_line in groups.iter_rows():
            where = "earlier lines of this input" if source == first_source else first_source
            result.notices.append(
                Notice(source, line, f"{n} record(s) repeat {where} from line {first_line} exactly "
                       "(same times, labels and counts): counted once")
            )  # fmt: skip
        per_source = dict(repeats.group_by("source").len().iter_rows())
        result.sources = [
            replace(s, windows=s.windows - per_source.get(s.name, 0)) if s.windows >= 0 else s for s in result.sources
        ]


def _drop_repeated_windows(result: Ingested) -> None:
    """Count once a window that repeats an earlier one exactly (:class:`Repeats`)."""
    if not result.sources:
        return
    repeats = Repeats.among(narrow_repeat_hashes(result.windows).to_numpy(writable=True))
    if repeats is not None:
        result.windows = repeats.drop(result.windows, result)


#: Bytes from each end of a file that make its content fingerprint (with its size).
FINGERPRINT_BYTES = 1 << 20


class _Seen:
    """Inputs already read, by resolved path and by content (size and a hash of both ends), so a
    file named twice, a folder with a file inside it also named, or a copy is read once."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        self.contents: dict[tuple[int, bytes], str] = {}

    def first(self, name: str, data: bytes | None) -> tuple[str, str] | None:
        """(the earlier input, "file" or "content") when ``name`` was read already, else None."""
        if data is None and name == "-":
            return None
        path = None
        if data is None:
            path = os.path.realpath(name)
            if path in self.paths:
                return self.paths[path], "file"
            if not os.path.isfile(path):  # a pipe, a device: read it, never twice-opened
                return None
        key = _fingerprint(path, data)
        if key is not None and key in self.contents:
            return self.contents[key], "content"
        if path is not None:
            self.paths[path] = name
        if key is not None:
            self.contents[key] = name
        return None


def _fingerprint(path: str | None, data: bytes | None) -> tuple[int, bytes] | None:
    if data is not None:
        return len(data), hashlib.blake2b(data[:FINGERPRINT_BYTES] + data[-FINGERPRINT_BYTES:]).digest()
    try:
        size = os.path.getsize(path or "")
        if size == 0:
            return None  # empty files are all alike, and count nothing
        with open(path or "", "rb") as f:
            head = f.read(FINGERPRINT_BYTES)
            f.seek(max(size - FINGERPRINT_BYTES, 0))
            tail = f.read(FINGERPRINT_BYTES)
    except OSError:
        return None  # the reader will say what is wrong with it
    return size, hashlib.blake2b(head + tail).digest()


def counted_sources(ingested: Ingested) -> list[SourceReport]:
    """``ingested.sources`` with the window counts of lazily read event files filled in."""
    lazy = [s.name for s in ingested.sources if s.windows < 0]
    counts: dict[str, int] = {}
    if lazy:
        counted = ingested.windows.filter(pl.col("source").is_in(lazy)).group_by("source").len().collect()
        counts = dict(counted.iter_rows())
    return [
        s if s.windows >= 0 else SourceReport(s.name, s.format, s.lines, counts.get(s.name, 0), s.skipped)
        for s in ingested.sources
    ]


def add_prometheus(
    ingested: Ingested, url: str, *, since: str = "6h", match: str = "", step: str | None = None
) -> None:
    """Add a Prometheus server's windows over the last ``since`` (see :mod:`prometheus_api`)."""
    from specobs.ingest import prometheus_api

    frame, notices = prometheus_api.read(url, since=since, match=match, step=step)
    ingested.add(
        frame.lazy(), SourceReport(f"{url} {match}".strip(), prometheus_api.FORMAT, None, frame.height, 0), notices
    )
