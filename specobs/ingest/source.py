"""Opening inputs: plain files, gzip files (by magic bytes, not by name) and stdin (``-``).

Every reader gets a :class:`Source`: a name for messages, the first bytes for format
detection, and ``open()`` for one pass over the whole (decompressed) content.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from specobs.errors import InputError

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"

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

    def open(self) -> BinaryIO:
        """A binary stream over the whole decompressed content, from the start."""
        if self.path is None:
            raw: BinaryIO = io.BytesIO(self.data or b"")
        else:
            raw = open(self.path, "rb", buffering=0)  # noqa: SIM115 - the caller closes it
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
            with open(path, "rb") as f:
                raw_head = f.read(2)
            size = path.stat().st_size
        except OSError as exc:
            raise InputError(name, f"cannot read ({exc.strerror or exc})") from None
        src = Source(name, path, raw_head.startswith(GZIP_MAGIC), size)
    src.head = _read_head(src)
    return src


def open_bytes(name: str, data: bytes) -> Source:
    """An input already in memory (stdin, an upload), named ``name`` in messages."""
    src = Source(name, None, data.startswith(GZIP_MAGIC), len(data), data=data)
    src.head = _read_head(src)
    return src


def _read_head(src: Source) -> bytes:
    try:
        with src.open() as stream:
            return stream.read(HEAD_BYTES)
    except GZIP_ERRORS as exc:
        # A gzip file too short to yield even its first block: nothing to keep.
        raise InputError(src.name, f"corrupt or truncated gzip file ({exc})") from None
    except OSError as exc:
        raise InputError(src.name, f"cannot read ({exc})") from None


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
