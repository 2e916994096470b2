"""Find the few interesting lines of a large text log without looking at the others.

A 1 GB vLLM server log holds a few hundred thousand metric lines among millions of
request and access-log lines. Splitting every line in Python is what makes naive parsers
slow. Two backends, same result:

- ``grep`` (plain files of 8 MiB or more, when a ``grep`` program is on PATH): ``grep -n -a -F``
  with the needles, the fastest line filter a machine has; its output is read by polars.
- Python (everything else: small files, gzip, stdin, no grep): fixed-size blocks in one
  reused buffer, jumps between needle occurrences with ``bytearray.find`` (a C-speed
  search), and copies out only the lines that hold one; line numbers are kept exact by
  counting newlines between hits.

Either way the result is a frame of (line number, text, needle index) that the parsers
read column-wise with polars.

Worked example::

    >>> found = find_lines(src, [b"SpecDecoding metrics:"])
    >>> found.frame.head(1).rows()
    [(1042, 'INFO 11-30 03:13:17 [metrics.py:120] SpecDecoding metrics: ...', 0)]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from specobs.errors import Skipped
from specobs.ingest.source import GZIP_ERRORS, Source

BLOCK_BYTES = 4 * 1024 * 1024
#: Lines longer than this are not metric lines; they are reported and skipped.
MAX_LINE_BYTES = 64 * 1024
GZIP_PIECE_BYTES = 64 * 1024
#: Plain files at least this large are filtered with grep when it is available.
GREP_MIN_BYTES = 8 * 1024 * 1024
FRAME_SCHEMA = {"line": pl.Int64, "text": pl.String, "needle": pl.Int8}

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


def find_lines(
    src: Source,
    needles: Sequence[bytes],
    *,
    progress: Progress | None = None,
    backend: str | None = None,
) -> FoundLines:
    """Return every line of ``src`` that contains one of ``needles``.

    ``backend`` forces ``"grep"`` or ``"python"`` (tests compare them); by default grep is
    used for plain files of :data:`GREP_MIN_BYTES` or more. Never raises for content:
    over-long lines and a truncated gzip stream become :class:`Skipped` entries and
    everything readable before them is kept.
    """
    grep = shutil.which("grep")
    eligible = src.path is not None and not src.compressed and grep is not None
    if backend == "grep" or (backend is None and eligible and (src.size or 0) >= GREP_MIN_BYTES):
        if not eligible:
            raise ValueError(f"{src.name}: the grep backend needs a plain file and a grep program")
        found = _find_with_grep(grep, src, needles)
        if found is not None:
            if progress:
                progress(src.size or 0)
            return found
    return _find_in_python(src, needles, progress)


def _find_with_grep(grep: str, src: Source, needles: Sequence[bytes]) -> FoundLines | None:
    """``grep -n -a -F`` for the needles, plus a concurrent ``grep -c`` for the line count.

    Returns None when grep fails (exit status 2), so the caller falls back to Python.
    """
    env = {**os.environ, "LC_ALL": "C"}
    patterns = [arg for needle in needles for arg in ("-e", needle.decode())]
    counter = subprocess.Popen([grep, "-c", "-a", "", "--", str(src.path)], stdout=subprocess.PIPE, env=env)
    total: list[bytes] = []
    reader = threading.Thread(target=lambda: total.append(counter.stdout.read() if counter.stdout else b""))
    reader.start()
    proc = subprocess.run(
        [grep, "-n", "-a", "-F", *patterns, "--", str(src.path)], capture_output=True, env=env, check=False
    )
    reader.join()
    counter.wait()
    if proc.returncode > 1 or counter.returncode > 1:
        return None
    found = FoundLines(total_lines=int((total[0] or b"0").strip() or 0))
    if not proc.stdout:
        return found
    raw = pl.DataFrame({"raw": proc.stdout.decode("utf-8", "replace").split("\n")}).filter(pl.col("raw") != "")
    parts = pl.col("raw").str.splitn(":", 2)
    frame = raw.select(
        line=parts.struct.field("field_0").cast(pl.Int64),
        text=parts.struct.field("field_1").str.strip_suffix("\r"),
    )
    too_long = frame.filter(pl.col("text").str.len_bytes() > MAX_LINE_BYTES)
    found.skipped.extend(
        Skipped(src.name, line, f"line longer than {MAX_LINE_BYTES // 1024} KiB") for line in too_long["line"]
    )
    frame = frame.filter(pl.col("text").str.len_bytes() <= MAX_LINE_BYTES)
    needle_index = pl.lit(None, pl.Int8)
    for index, needle in reversed(list(enumerate(needles))):
        needle_index = (
            pl.when(pl.col("text").str.contains(needle.decode(), literal=True))
            .then(pl.lit(index, pl.Int8))
            .otherwise(needle_index)
        )
    found.frame = frame.with_columns(needle=needle_index).filter(pl.col("needle").is_not_null())
    return found


def _find_in_python(src: Source, needles: Sequence[bytes], progress: Progress | None) -> FoundLines:
    """The pure-Python backend (see the module docstring)."""
    found = FoundLines()
    raw: list[bytes] = []
    numbers: list[int] = []
    kinds: list[int] = []
    buf = bytearray(BLOCK_BYTES + MAX_LINE_BYTES)
    view = memoryview(buf)
    filled = 0  # bytes of buf holding data (a carried partial line first)
    line_base = 1  # line number of the first byte of buf
    skipping_long = False  # inside an over-long line whose start was already dropped
    open_last_line = False
    with src.open() as stream:
        while True:
            n, error = _read_block(stream, view[filled : filled + BLOCK_BYTES], src.compressed)
            if error is not None:
                found.skipped.append(
                    Skipped(src.name, None, f"gzip stream truncated or corrupt ({error}); the lines before it are kept")
                )
            final = not n or error is not None
            filled += n
            if progress and n:
                progress(n)
            if error is not None:
                filled = buf.rfind(b"\n", 0, filled) + 1  # a line cut off mid-way is not data
            end = filled if final else buf.rfind(b"\n", 0, filled) + 1
            if end == 0 and not final and filled < BLOCK_BYTES:
                continue  # a short read without a newline yet: read on
            if end == 0 and not final:
                # No newline in a whole block: an over-long line. Drop it, remember to skip its rest.
                if not skipping_long:
                    _note_long_line(found, src.name, line_base, buf, filled, needles)
                skipping_long = True
                filled = 0
                continue
            start = 0
            if skipping_long:
                start = buf.find(b"\n", 0, end) + 1  # 0 only at the end of input: nothing left
                if start:
                    line_base += 1
                    skipping_long = False
            if not skipping_long:
                line_base = _scan_block(
                    buf, start, end, needles, line_base, (numbers, kinds, raw), found.skipped, src.name
                )
            if final:
                # A last line without a newline still counts (grep and wc count it too).
                open_last_line = skipping_long or (end > start and buf[end - 1] != 10)
                break
            rest = filled - end
            buf[:rest] = buf[end:filled]
            filled = rest
    found.total_lines = line_base - 1 + open_last_line
    if raw:
        found.frame = pl.DataFrame(
            {"line": numbers, "text": b"\n".join(raw).decode("utf-8", "replace").split("\n"), "needle": kinds},
            schema=FRAME_SCHEMA,
        )
    return found


def _read_block(stream, view: memoryview, compressed: bool) -> tuple[int, Exception | None]:
    """Fill ``view`` from ``stream``; a gzip stream is read in small pieces so that a cut-off
    file loses only its last piece, and its error is returned instead of raised."""
    if not compressed:
        return stream.readinto(view), None
    n = 0
    while n < len(view):
        try:
            got = stream.readinto(view[n : n + GZIP_PIECE_BYTES])
        except GZIP_ERRORS as exc:
            return n, exc
        if not got:
            break
        n += got
    return n, None


def _scan_block(
    buf: bytearray,
    start: int,
    end: int,
    needles: Sequence[bytes],
    line_base: int,
    out: tuple[list[int], list[int], list[bytes]],
    skipped: list[Skipped],
    name: str,
) -> int:
    """Collect the needle lines of ``buf[start:end]``; return the line number after it."""
    find, rfind = buf.find, buf.rfind
    hits: list[tuple[int, int, int]] = []  # (line start, line end, needle index)
    for index, needle in enumerate(needles):
        pos = find(needle, start, end)
        while pos != -1:
            line_end = find(b"\n", pos, end)
            if line_end == -1:
                line_end = end
            hits.append((rfind(b"\n", start, pos) + 1 or start, line_end, index))
            pos = find(needle, line_end, end)
    if len(needles) > 1:
        hits.sort()
    count = buf.count
    cursor = start  # newlines before cursor are already counted in line_base
    last_line_start = -1
    numbers, kinds, raw = out
    for line_start, line_end, index in hits:
        if line_start == last_line_start:
            continue  # a second needle on the same line: the first needle in the list wins
        last_line_start = line_start
        line_base += count(b"\n", cursor, line_start)
        cursor = line_start
        if line_end - line_start > MAX_LINE_BYTES:
            skipped.append(Skipped(name, line_base, f"line longer than {MAX_LINE_BYTES // 1024} KiB"))
            continue
        if buf[line_end - 1] == 13:  # "\r" of a CRLF line ending
            line_end -= 1
        numbers.append(line_base)
        kinds.append(index)
        raw.append(buf[line_start:line_end])
    return line_base + count(b"\n", cursor, end)


def _note_long_line(
    found: FoundLines, name: str, line: int, buf: bytearray, filled: int, needles: Sequence[bytes]
) -> None:
    if any(buf.find(needle, 0, filled) != -1 for needle in needles):
        found.skipped.append(Skipped(name, line, f"line longer than {BLOCK_BYTES // (1024 * 1024)} MiB"))
