"""Find the few interesting lines of a large text log without looking at the others.

A 1 GB vLLM server log holds a few hundred thousand metric lines among millions of
request and access-log lines. Splitting every line in Python is what makes naive parsers
slow; instead this reads fixed-size blocks into one reused buffer, jumps between
occurrences of a handful of literal needles with ``bytearray.find`` (a C-speed search),
and copies out only the lines that contain one. Line numbers are kept exact by counting
newlines between hits. The lines found are then parsed column-wise by polars.

Worked example::

    >>> found = find_lines(src, [b"SpecDecoding metrics:"])
    >>> found.line_numbers[:2], found.lines[0][:40]
    ([1042, 1087], 'INFO 11-30 03:13:17 [metrics.py:120] Spe')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specobs.errors import Skipped
from specobs.ingest.source import GZIP_ERRORS, Source

BLOCK_BYTES = 4 * 1024 * 1024
#: Lines longer than this are not metric lines; they are reported and skipped.
MAX_LINE_BYTES = 64 * 1024
GZIP_PIECE_BYTES = 64 * 1024

Progress = Callable[[int], None]


@dataclass
class FoundLines:
    """The lines of one input that contain a needle, with their 1-based line numbers and the
    index of the needle each contains (the first in the list when it has several)."""

    line_numbers: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    total_lines: int = 0
    skipped: list[Skipped] = field(default_factory=list)


def find_lines(
    src: Source,
    needles: Sequence[bytes],
    *,
    progress: Progress | None = None,
) -> FoundLines:
    """Return every line of ``src`` that contains one of ``needles``.

    Never raises for content: over-long lines and a truncated gzip stream become
    :class:`Skipped` entries and everything readable before them is kept.
    """
    found = FoundLines()
    raw: list[bytes] = []
    buf = bytearray(BLOCK_BYTES + MAX_LINE_BYTES)
    view = memoryview(buf)
    filled = 0  # bytes of buf holding data (a carried partial line first)
    line_base = 1  # line number of the first byte of buf
    skipping_long = False  # inside an over-long line whose start was already dropped
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
                line_base = _scan_block(buf, start, end, needles, line_base, found, raw, src.name)
            rest = filled - end
            buf[:rest] = buf[end:filled]
            filled = rest
            if final:
                break
    found.total_lines = line_base - 1
    if raw:
        found.lines = b"\n".join(raw).decode("utf-8", "replace").split("\n")
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
    found: FoundLines,
    raw: list[bytes],
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
    numbers, kinds = found.line_numbers, found.kinds
    for line_start, line_end, index in hits:
        if line_start == last_line_start:
            continue  # a second needle on the same line: the first needle in the list wins
        last_line_start = line_start
        line_base += count(b"\n", cursor, line_start)
        cursor = line_start
        if line_end - line_start > MAX_LINE_BYTES:
            found.skipped.append(Skipped(name, line_base, f"line longer than {MAX_LINE_BYTES // 1024} KiB"))
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
