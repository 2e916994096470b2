"""Opening inputs: plain files, gzip files (by magic bytes, not by name) and stdin (``-``).

Every reader gets a :class:`Source`: a name for messages, the first bytes for format
detection, and ``open()`` for one pass over the whole (decompressed) content.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import select
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from specobs.errors import InputError, Notice, Skipped

T = TypeVar("T")

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
#: Byte-order marks of UTF-16 text, which the line scanner cannot read.
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
#: Seconds a pipe, FIFO or character device may stay silent before reading it fails
#: (a FIFO nobody writes to would otherwise hang the command).
STREAM_READ_TIMEOUT_S = 10.0
#: Bytes read per step from a pipe, FIFO or character device.
STREAM_PIECE_BYTES = 1024 * 1024
#: Compressed bytes decompressed per step when a gzip stream is read incrementally.
GZIP_PIECE_BYTES = 64 * 1024

#: Errors a gzip stream raises when it is cut short or corrupt.
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


@dataclass
class Source:
    """One input: a file path or ``-`` for stdin."""

    name: str
    path: Path | None
    compressed: bool
    size: int | None
    head: bytes = field(default=b"", repr=False)
    #: stdin is read once into memory so that it can be opened more than once.
    data: bytes | None = field(default=None, repr=False)

    def raw(self) -> BinaryIO:
        """A binary stream over the bytes as stored (compressed or not), from the start."""
        if self.path is None:
            return io.BytesIO(self.data or b"")
        return open(self.path, "rb", buffering=0)

    def open(self) -> BinaryIO:
        """A binary stream over the whole decompressed content, from the start."""
        raw = self.raw()
        if self.compressed:
            # typeshed types GzipFile as a BufferedIOBase, not a BinaryIO; it reads the same way.
            return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
        return raw


def open_source(name: str) -> Source:
    """Open ``name`` (a path or ``-``) and read its first bytes; raise :class:`InputError` if unreadable."""
    if name == "-":
        return open_bytes("<stdin>", sys.stdin.buffer.read())
    else:
        path = Path(name)
        if not path.exists():
            raise InputError(name, "no such file")
        if path.is_dir():
            raise InputError(name, "is a folder (folders are expanded by the caller)")
        try:
            mode = path.stat().st_mode
            if not stat.S_ISREG(mode):
                # Pipes, FIFOs, process substitution (/dev/fd/N) and character devices cannot be
                # memory-mapped or read twice: read them once, as a stream, into memory.
                return open_bytes(name, read_stream(path, name))
            with open(path, "rb") as f:
                raw_head = f.read(2)
            size = path.stat().st_size
        except OSError as exc:
            raise InputError(name, f"cannot read ({exc.strerror or exc})") from None
        src = Source(name, path, raw_head.startswith(GZIP_MAGIC), size)
    src.head = _read_head(src)
    return src


def read_stream(path: Path, name: str, timeout: float | None = None) -> bytes:
    """Everything a pipe, FIFO or character device yields until its end; :class:`InputError`
    when it stays silent for ``timeout`` seconds (a FIFO without a writer, say)."""
    timeout = STREAM_READ_TIMEOUT_S if timeout is None else timeout
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    pieces: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise InputError(name, f"nothing to read for {timeout:g} s (a pipe or FIFO without a writer?)")
            try:
                piece = os.read(fd, STREAM_PIECE_BYTES)
            except BlockingIOError:
                continue
            if not piece:
                return b"".join(pieces)
            pieces.append(piece)
    finally:
        os.close(fd)


def open_bytes(name: str, data: bytes) -> Source:
    """An input already in memory (stdin, an upload), named ``name`` in messages."""
    src = Source(name, None, data.startswith(GZIP_MAGIC), len(data), data=data)
    src.head = _read_head(src)
    return src


def _read_head(src: Source) -> bytes:
    try:
        if src.compressed:
            unpacked = gunzip(src, HEAD_BYTES)
            if unpacked.cut_at is not None and b"\n" not in unpacked.data:
                # Not even one complete line before the cut: nothing to keep.
                raise InputError(src.name, f"corrupt or truncated gzip file ({unpacked.error})")
            head = unpacked.data
        else:
            with src.open() as stream:
                head = stream.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(src.name, f"cannot read ({exc})") from None
    if head.startswith(UTF16_BOMS):
        raise InputError(src.name, "UTF-16 text, not UTF-8: convert with iconv -f UTF-16 -t UTF-8")
    return head


@dataclass
class Gunzipped:
    """The decompressed content of a gzip input; ``cut_at`` is the compressed byte offset
    where the stream ended early or turned corrupt (None when it is whole)."""

    data: bytes
    cut_at: int | None = None
    error: str | None = None


def read_whole(src: Source) -> tuple[bytes, Notice | None]:
    """The whole decompressed content and, for a gzip stream cut short or corrupt, a notice.

    The stream is decompressed incrementally, so every complete line before the cut is kept;
    the line cut off mid-way is not data.
    """
    if not src.compressed:
        if src.data is not None:
            return src.data, None
        with src.open() as stream:
            return stream.read(), None
    unpacked = gunzip(src)
    if unpacked.cut_at is None:
        return unpacked.data, None
    data = unpacked.data[: unpacked.data.rfind(b"\n") + 1]
    lines = data.count(b"\n")
    why = (
        f"gzip stream truncated or corrupt at compressed byte {unpacked.cut_at} ({unpacked.error}), "
        f"in line {lines + 1}; the {lines} complete lines before it are kept"
    )
    return data, Notice(src.name, None, why)


def first_record_has(head: bytes, key: str) -> bool:
    """True when the first non-empty line of ``head`` is a JSON object with ``key`` (how the
    side files of a capture, such as decisions and run metadata, are told apart)."""
    for raw in head.split(b"\n"):
        line = raw.strip()
        if line:
            try:
                record = json.loads(line)
            except ValueError:
                return False
            return isinstance(record, dict) and key in record
    return False


def read_records(
    src: Source, parse: Callable[[Any], tuple[T | None, str | None]]
) -> tuple[list[T], list[Skipped], int]:
    """Every record of a JSON Lines file that ``parse`` accepts, the skipped lines (FILE:LINE and
    ``parse``'s reason), and the number of lines; a gzip cut is a notice among the skipped."""
    data, cut = read_whole(src)
    skipped: list[Skipped] = [cut] if cut is not None else []
    out: list[T] = []
    lines = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        lines = number
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            skipped.append(Skipped(src.name, number, "not valid JSON"))
            continue
        parsed, why = parse(record)
        if parsed is None:
            skipped.append(Skipped(src.name, number, why or "invalid"))
        else:
            out.append(parsed)
    return out, skipped, lines


def gunzip(src: Source, limit: int | None = None) -> Gunzipped:
    """Decompress ``src`` incrementally (every member), keeping everything before a cut or
    corruption; with ``limit``, stop once that many bytes are out."""
    with src.raw() as raw:
        out: list[bytes] = []
        produced = 0
        consumed = 0
        inflater = zlib.decompressobj(wbits=31)
        pending = b""
        while True:
            piece = pending or raw.read(GZIP_PIECE_BYTES)
            pending = b""
            if not piece:
                if inflater.eof or (consumed == 0 and not out):
                    break
                return Gunzipped(b"".join(out), consumed, "stream cut short")
            try:
                chunk = inflater.decompress(piece)
            except zlib.error as exc:
                return Gunzipped(b"".join(out), consumed, str(exc))
            out.append(chunk)
            produced += len(chunk)
            consumed += len(piece) - len(inflater.unused_data)
            if limit is not None and produced >= limit:
                break
            if inflater.eof:
                rest = inflater.unused_data
                if not rest.strip(b"\x00"):
                    rest = b""  # trailing zero padding after the last member
                if rest:
                    inflater = zlib.decompressobj(wbits=31)
                    pending = rest
                else:
                    more = raw.read(GZIP_PIECE_BYTES)
                    if not more.strip(b"\x00"):
                        break
                    inflater = zlib.decompressobj(wbits=31)
                    pending = more
        data = b"".join(out)
        return Gunzipped(data[:limit] if limit is not None else data)


def expand_paths(paths: list[str]) -> Iterator[tuple[str, bool]]:
    """Yield ``(path, explicit)`` for each input; folders are walked (sorted, hidden files skipped).

    ``explicit`` is False for files found inside a folder, which callers may skip when they
    are not a recognised format instead of failing.
    """
    for name in paths:
        if name != "-" and os.path.isdir(name):
            for root, dirs, files in os.walk(name):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for file in sorted(files):
                    if not file.startswith("."):
                        yield os.path.join(root, file), False
        else:
            yield name, True
