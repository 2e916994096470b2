"""Records read twice are counted once: an input named twice or copied (:class:`Seen`), windows
that repeat earlier ones exactly (:class:`Repeats`), finished requests captured and also saved."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from specobs.errors import Notice
from specobs.records import SourceReport

#: What makes two finished-request rows one request read twice (its capture row and its saved output).
REQUEST_REPEAT_KEY = (
    "request_key", "num_prompt_tokens", "num_output_tokens", "num_spec_steps", "num_draft_tokens",
    "num_accepted_tokens", "acceptance_histogram",
)  # fmt: skip


def drop_repeated_requests(rows: pl.DataFrame) -> tuple[pl.DataFrame, list[Notice]]:
    """Finished requests ``rows`` with a request whose row repeats an earlier one (same key and
    numbers: the capture's row and the saved output of the same request, or a file read twice)
    counted once, and the notice saying so (none when nothing repeats)."""
    if rows.height < 2 or rows.get_column("request_key").n_unique() == rows.height:
        return rows, []
    first = rows.select(pl.struct(REQUEST_REPEAT_KEY).is_first_distinct()).to_series()
    repeats = int((~first).sum())
    if not repeats:
        return rows, []
    notice = Notice("requests", None, f"{repeats} finished request(s) read twice (same request id and counts, e.g. "
                    "captured and saved as outputs): counted once")  # fmt: skip
    return rows.filter(first), [notice]


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


class Hashes:
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


@dataclass(frozen=True)
class Dropped:
    """What :meth:`Repeats.drop` gives: the windows without their repeats, a notice per source
    that repeats another, and how many windows each such source lost."""

    windows: pl.LazyFrame
    notices: tuple[Notice, ...] = ()
    per_source: Mapping[str, int] = field(default_factory=dict)

    def sources(self, sources: Sequence[SourceReport]) -> list[SourceReport]:
        """``sources`` with the window counts (where known) lowered by the repeats dropped."""
        lost = self.per_source
        return [replace(s, windows=s.windows - lost.get(s.name, 0)) if s.windows >= 0 else s for s in sources]


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
        #: (source, first source) → repeats, first repeated line, first line repeated, so far: the
        #: slices of one file give one notice, as the whole file would.
        self._tally: dict[tuple[str, str], tuple[int, int, int]] = {}

    @classmethod
    def among(cls, values: np.ndarray) -> Repeats | None:
        """Repeats of the windows whose narrow hashes are ``values`` (sorted in place), or None
        when no hash occurs twice."""
        values.sort()
        twice = values[1:][values[1:] == values[:-1]]
        del values
        return cls(pl.Series("_narrow", np.unique(twice), pl.UInt64)) if twice.size else None

    def drop(self, windows: pl.LazyFrame) -> Dropped:
        """``windows`` (the next part) without the repeats of windows seen so far, with a notice
        for each source that repeats another (naming the first repeated line and where it was
        read first; counting the repeats of the parts before too: a notice with the source and line
        of one given then replaces it) and how many windows it lost."""
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
            return Dropped(windows)
        kept = numbered.filter(~pl.col("_row").is_in(repeats["_row"].implode())).drop("_row")
        return Dropped(kept, self._notices(repeats), dict(repeats.group_by("source").len().iter_rows()))

    def _notices(self, repeats: pl.DataFrame) -> tuple[Notice, ...]:
        assert self._firsts is not None
        named = repeats.join(self._firsts, on=self._key, how="left", nulls_equal=True)
        groups = named.group_by("source", "first_source", maintain_order=True).agg(
            n=pl.len(), line=pl.col("source_line").min(), first_line=pl.col("first_line").min()
        )
        notices = []
        for source, first_source, n, line, first_line in groups.iter_rows():
            if (source, first_source) in self._tally:
                before = self._tally[(source, first_source)]
                n, line, first_line = before[0] + n, min(before[1], line), min(before[2], first_line)
            self._tally[(source, first_source)] = (n, line, first_line)
            where = "earlier lines of this input" if source == first_source else first_source
            notices.append(
                Notice(source, line, f"{n} record(s) repeat {where} from line {first_line} exactly "
                       "(same times, labels and counts): counted once")
            )  # fmt: skip
        return tuple(notices)


def drop_repeated_windows(windows: pl.LazyFrame, sources: Sequence[SourceReport]) -> Dropped:
    """``windows`` with a window that repeats an earlier one exactly counted once (:class:`Repeats`)."""
    if not sources:
        return Dropped(windows)
    repeats = Repeats.among(narrow_repeat_hashes(windows).to_numpy(writable=True))
    return repeats.drop(windows) if repeats is not None else Dropped(windows)


#: Bytes from each end of a file that make its content fingerprint (with its size).
FINGERPRINT_BYTES = 1 << 20


class Seen:
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


__all__ = [
    "REPEAT_KEY",
    "REQUEST_REPEAT_KEY",
    "Dropped",
    "Hashes",
    "Repeats",
    "Seen",
    "drop_repeated_requests",
    "drop_repeated_windows",
    "narrow_repeat_hashes",
]
