"""What a set of inputs gave: :class:`Ingested` (windows, finished requests, side records, what
was skipped and why) and, for inputs too large to hold at once, its :class:`Part` s, read when
asked for (:meth:`Ingested.parts`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import polars as pl

from specobs import schema
from specobs.errors import InputError, Notice, Skipped
from specobs.ingest.events import read_parquet_slice
from specobs.ingest.registry import read_source
from specobs.ingest.repeats import Repeats
from specobs.ingest.source import open_source
from specobs.records import RunMetadata, SourceReport, TunerDecision, TuneResult


class FileSlice(NamedTuple):
    """Rows ``offset`` to ``offset + rows`` of a Parquet event file (the whole file from 0)."""

    name: str
    rows: int
    offset: int = 0
    #: Whether the file is read in slices (one of several), not whole.
    sliced: bool = False


@dataclass
class Part:
    """One part of an input read in parts: consecutive Parquet event files, or slices of one
    file too large to hold (``files``), read when needed, or the ``windows`` of the inputs read
    whole between them."""

    files: list[FileSlice] = field(default_factory=list)
    windows: pl.LazyFrame | None = None
    #: The sources whose windows the part holds.
    names: set[str] = field(default_factory=set)
    #: Files named on the command line (not met in a folder): one that cannot be read raises.
    explicit: set[str] = field(default_factory=set)


@dataclass
class Ingested:
    """Everything read from a set of inputs."""

    #: Every row in the ``windows`` schema: a log or scrape interval, or one captured engine step
    #: (a step is a window one step long, so both sum the same way; docs/schema.md).
    windows: pl.LazyFrame = field(default_factory=lambda: schema.empty(schema.WINDOWS).lazy())
    sources: list[SourceReport] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    #: Inputs that could not be read at all (only with ``keep_going``; otherwise they raise).
    failed: list[InputError] = field(default_factory=list)
    #: What was assumed while reading (a counter reset, a baseline): not skipped, but said.
    notices: list[Notice] = field(default_factory=list)
    #: The online tuner's decision log (``SPECOBS_ONLINE_TUNER``), oldest first.
    decisions: list[TunerDecision] = field(default_factory=list)
    #: ``specobs tune`` results read back (``tune.json``).
    tune_runs: list[tuple[str, TuneResult]] = field(default_factory=list)
    #: Finished requests (``schema.REQUESTS``): capture request files, server responses, offline outputs.
    requests: pl.DataFrame = field(default_factory=lambda: schema.empty(schema.REQUESTS))
    #: Serving-benchmark results (``schema.BENCH``): ``vllm bench serve`` and sweep result files.
    bench: pl.DataFrame = field(default_factory=lambda: schema.empty(schema.BENCH))
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
    #: Read once (a surface that keeps sums, not rows): the windows held whole are let go as
    #: :meth:`parts` hands them over, their window counts taken first.
    release: bool = False
    #: The parts (by index in ``deferred``) whose skipped rows, notices and counts are recorded.
    _recorded: set[int] = field(default_factory=set, repr=False)
    #: Windows counted so far of each file read in slices (counted slice by slice).
    _file_windows: dict[str, int] = field(default_factory=dict, repr=False)

    def parts(self) -> Iterator[pl.LazyFrame]:
        """The windows in parts that each fit in memory, in input order: without ``deferred``,
        :attr:`windows` whole; with it, each :class:`Part`. A part of files is read when asked
        for; the first time, its skipped rows, notices, repeats dropped and window counts go
        into this object (read again, the same parts come, and nothing is recorded twice)."""
        if not self.deferred:
            if not self.release:
                yield self.windows
                return
            self.sources = counted_sources(self)
            held = [self.windows]
            self.windows = schema.empty(schema.WINDOWS).lazy()
            yield held.pop()  # nothing here holds the rows while the caller sums them
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
                for piece in part.files:
                    name = piece.name
                    if record and piece.sliced and not piece.offset:
                        self._file_windows[name] = 0
                    if not any(s.name == name for s in self.sources):
                        continue  # found damaged (a first pass, an earlier slice): it is no source
                    try:
                        src = open_source(name)
                        read = (
                            read_parquet_slice(src, piece.offset, piece.rows)
                            if piece.sliced
                            else read_source(src, "events")
                        )
                    except InputError as exc:  # damage the first pass did not read
                        if record and piece.offset:  # the slices before it are counted already
                            self._unreadable_rows(piece, exc, explicit=name in part.explicit)
                        elif record:
                            self.unreadable(exc, explicit=name in part.explicit, keep_going=self.keep_going)
                        continue
                    if record:
                        at = next(i for i, s in enumerate(self.sources) if s.name == name)
                        before = self.sources[at].skipped if piece.offset else 0
                        self.sources[at] = replace(self.sources[at], skipped=before + read.report.skipped)
                        self.skipped.extend(read.skipped)
                    if read.windows is not None:
                        frames.append(read.windows)
                if not frames:
                    continue
                whole = self._counted(pl.concat(frames, how="vertical_relaxed"), part.names, repeats, record=record)
                del frames
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

    def unreadable_file(self, name: str, why: str) -> None:
        """A file read in parts found damaged before any of its rows were counted (a first pass
        over it): as :meth:`unreadable`, and none of its parts is read."""
        explicit = any(name in part.explicit for part in self.deferred)
        self.unreadable(InputError(name, why), explicit=explicit, keep_going=self.keep_going)

    def _unreadable_rows(self, piece: FileSlice, exc: InputError, *, explicit: bool) -> None:
        """A slice of a file that cannot be read, after slices of it were: an explicit file
        raises (unless ``keep_going``), as reading it whole would; otherwise its rows are
        skipped, named by the slice's first row, and the file's readable slices kept."""
        if explicit and not self.keep_going:
            raise exc
        last = piece.offset + piece.rows
        self.skipped.append(
            Skipped(piece.name, piece.offset + 1, f"rows {piece.offset + 1}–{last} {exc.why}: left out")
        )
        self.sources = [replace(s, skipped=s.skipped + piece.rows) if s.name == piece.name else s for s in self.sources]

    def _counted(
        self, windows: pl.LazyFrame, names: set[str], repeats: Repeats | None, *, record: bool
    ) -> pl.LazyFrame:
        """``windows`` read, its repeats dropped, and (``record``) the notices of those and the
        window counts of its sources ``names`` that were not counted yet (event files) set."""
        frame = windows.collect().lazy()
        if repeats is not None:
            dropped = repeats.drop(frame)
            frame = dropped.windows.collect().lazy()
            if record:  # a later slice's notice of a source counts the earlier slices' too
                again = {(n.source, n.line) for n in dropped.notices}
                self.notices = [n for n in self.notices if (n.source, n.line) not in again]
                self.notices.extend(dropped.notices)
                self.sources = dropped.sources(self.sources)
        if record:
            counts = dict(frame.group_by("source").len().collect().iter_rows())
            for name in names & set(self._file_windows):  # a file in slices: this slice adds to it
                self._file_windows[name] += counts.get(name, 0)
                counts[name] = self._file_windows[name]
            self.sources = [
                replace(s, windows=counts.get(s.name, 0))
                if s.name in names and (s.windows < 0 or s.name in self._file_windows)
                else s
                for s in self.sources
            ]
        return frame

    def with_windows(self, frame: pl.LazyFrame, report: SourceReport, skipped: Sequence[Skipped] = ()) -> Ingested:
        """A new :class:`Ingested`: this one with one more input's windows (as :meth:`add`)."""
        added = replace(
            self, sources=[*self.sources], skipped=[*self.skipped], notices=[*self.notices],
            deferred=[*self.deferred], _recorded=set(self._recorded),
        )  # fmt: skip
        added.add(frame, report, skipped)
        return added

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


__all__ = ["Ingested", "Part", "counted_sources"]
