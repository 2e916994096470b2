"""Find the few interesting lines of a large text log without parsing the others.

A 1 GB vLLM server log holds a few hundred thousand metric lines among millions of
request and access-log lines. polars' CSV reader, told that every line is one field (no
quoting, a separator that never occurs in logs), splits the file into lines on every core,
numbers them, and keeps only the lines that hold one of a few literal needles; nothing is
materialised for the other lines. Plain files are scanned in place; gzip and stdin are
decompressed by Python first (so a truncated gzip stream keeps every complete line before
the cut) and scanned from memory.

Worked example::

    >>> found = find_lines(src, [b"SpecDecoding metrics:"])
    >>> found.frame.head(1).rows()
    [(1042, 'INFO 11-30 03:13:17 [metrics.py:120] SpecDecoding metrics: ...', 0)]
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from specobs.errors import Skipped
from specobs.ingest.source import GZIP_ERRORS, Source

#: Lines longer than this are not metric lines; they are reported and skipped.
MAX_LINE_BYTES = 64 * 1024
GZIP_PIECE_BYTES = 64 * 1024
#: Lines per batch between progress reports.
BATCH_LINES = 1_000_000
FRAME_SCHEMA = {"line": pl.Int64, "text": pl.String, "needle": pl.Int8}
ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]"
# One field per line: no quoting, and a separator (NUL) that text logs do not contain.
_CSV_OPTIONS = {
    "has_header": False,
    "separator": "\x00",
    "quote_char": None,
    "new_columns": ["text"],
    "schema": {"text": pl.String},
    "truncate_ragged_lines": True,
    "encoding": "utf8-lossy",
}

Progress = Callable[[int], None]


@dataclass
class FoundLines:
    """The lines of one input that hold a needle.

    ``frame`` has ``line`` (1-based), ``text`` and ``needle`` (index of the needle the line
    holds; the first in the list when it holds several), in line order.
    """

    frame: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FRAME_SCHEMA))
    total_lines: int = 0
    skipped: list[Skipped] = field(default_factory=list)


Fields = Mapping[int | None, Mapping[str, pl.Expr]]


def find_lines(
    src: Source,
    needles: Sequence[bytes],
    *,
    fields: Fields | None = None,
    progress: Progress | None = None,
) -> FoundLines:
    """Return every line of ``src`` that contains one of ``needles``.

    ``fields`` maps a needle index (or None, for every line found) to named expressions on
    ``text``; they are evaluated batch by batch while scanning, and only on the lines that
    hold that needle, so a parser's regexes never run on lines they cannot match. ANSI
    colour codes are removed before. Never raises for content: over-long lines and a
    truncated gzip stream become :class:`Skipped` entries and everything readable before
    them is kept.
    """
    found = FoundLines()
    if src.path is not None and not src.compressed:
        lines = pl.scan_csv(src.path, **_CSV_OPTIONS)
    else:
        data, error = _read_all(src)
        if error is not None:
            found.skipped.append(
                Skipped(src.name, None, f"gzip stream truncated or corrupt ({error}); the lines before it are kept")
            )
        if not data:
            return found
        lines = pl.scan_csv(io.BytesIO(data), **_CSV_OPTIONS)
    texts = [needle.decode() for needle in needles]
    holds = [pl.col("text").str.contains(text, literal=True) for text in texts]
    needle = pl.lit(None, pl.Int8)
    for index in reversed(range(len(texts))):
        needle = pl.when(holds[index]).then(pl.lit(index, pl.Int8)).otherwise(needle)
    numbered = lines.with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64))
    parts: list[pl.DataFrame] = []
    per_line = max(len(src.head) / max(src.head.count(b"\n"), 1), 1.0)
    too_long = pl.col("text").str.len_bytes() > MAX_LINE_BYTES
    for batch in numbered.collect_batches(chunk_size=BATCH_LINES):
        if not batch.height:
            continue
        found.total_lines = int(batch["line"][-1])
        matched = batch.filter(pl.any_horizontal(holds)).with_columns(needle=needle)
        found.skipped.extend(
            Skipped(src.name, line, f"line longer than {MAX_LINE_BYTES // 1024} KiB")
            for line in matched.filter(too_long)["line"].to_list()
        )
        parts.append(_with_fields(matched.filter(~too_long), fields or {}))
        if progress:
            progress(int(batch.height * per_line))
    found.frame = pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame(schema=FRAME_SCHEMA)
    return found


def _with_fields(lines: pl.DataFrame, fields: Fields) -> pl.DataFrame:
    """Clean ``text`` and evaluate each needle's field expressions on its own lines."""
    lines = lines.cast(FRAME_SCHEMA)
    if lines.height and lines["text"].str.contains("\x1b", literal=True).any():
        lines = lines.with_columns(pl.col("text").str.replace_all(ANSI, ""))
    if not fields:
        return lines
    if None in fields:
        lines = lines.with_columns(**fields[None])
    specific = [k for k in fields if k is not None]
    pieces = [lines.filter(pl.col("needle") == k).with_columns(**fields[k]) for k in specific]
    pieces.append(lines.filter(~pl.col("needle").is_in(specific)))
    return pl.concat(pieces, how="diagonal_relaxed").sort("line")


def _read_all(src: Source) -> tuple[bytes, Exception | None]:
    """The whole decompressed content; a gzip stream cut short keeps its complete lines."""
    pieces: list[bytes] = []
    with src.open() as stream:
        while True:
            try:
                piece = stream.read(GZIP_PIECE_BYTES)
            except GZIP_ERRORS as exc:
                data = b"".join(pieces)
                return data[: data.rfind(b"\n") + 1], exc  # a line cut off mid-way is not data
            if not piece:
                return b"".join(pieces), None
            pieces.append(piece)
