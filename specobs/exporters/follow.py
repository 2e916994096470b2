"""Follow growing files like ``tail -F``: new complete lines, across rotation and truncation.

A path may be a file or a folder (new files in it are picked up: rotated event files, new
Parquet parts). A file is read from where the last poll stopped; a line is handed over only
once its newline has been written. When the path is replaced (log rotation: rename + new
file) the rest of the old file is read first, then the new one from its start; when a file
shrinks (truncation) it is read again from the start.

Each piece handed over is a :class:`Lines` (bytes) that knows the line number of its first
line in its file, so a bad line can be named ``FILE:LINE`` (None after ``from_end``, which
skips lines without counting them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO


class Lines(bytes):
    """Complete lines of one file; ``first_line`` is the number of the first (1-based) or None."""

    first_line: int | None = None

    @classmethod
    def at(cls, data: bytes, first_line: int | None) -> Lines:
        out = cls(data)
        out.first_line = first_line
        return out


@dataclass
class _Followed:
    path: Path
    handle: BinaryIO | None = None
    inode: int | None = None
    offset: int = 0
    partial: bytes = b""
    seen: bool = False
    kind: str | None = None  # detected format, remembered across polls
    lines: int | None = 0  # lines handed over from the current file (None: unknown, after from_end)


@dataclass
class Follower:
    """Follow ``paths`` (files or folders); ``poll()`` returns new data per file."""

    paths: list[Path]
    from_end: bool = False
    _files: dict[Path, _Followed] = field(default_factory=dict)

    def _candidates(self) -> Iterator[Path]:
        for path in self.paths:
            if path.is_dir():
                for child in sorted(path.iterdir()):
                    if child.is_file() and not child.name.startswith(".") and child.suffix != ".parquet":
                        yield child
            elif path.suffix != ".parquet":
                yield path

    def new_parquet_files(self) -> list[Path]:
        """Parquet parts that appeared since the last call (they appear whole, by rename)."""
        found = []
        for path in self.paths:
            for child in sorted(path.iterdir()) if path.is_dir() else [path]:
                if child.suffix == ".parquet" and not child.name.startswith(".") and child not in self._files:
                    self._files[child] = _Followed(child, seen=True, kind="events-parquet")
                    found.append(child)
        return found

    def poll(self) -> list[tuple[_Followed, Lines]]:
        """``(file state, complete new lines)`` for every file with new data (after a rotation,
        the rest of the old file and the start of the new one come as two pieces)."""
        out = []
        for path in self._candidates():
            state = self._files.get(path)
            if state is None:
                state = self._files[path] = _Followed(path)
            out += [(state, data) for data in self._read(state) if data]
        return out

    def _read(self, state: _Followed) -> list[Lines]:
        try:
            stat = os.stat(state.path)
        except FileNotFoundError:
            return [self._drain(state)]  # rotated away and not recreated yet: finish the old file
        chunks = []
        if state.handle is not None and stat.st_ino != state.inode:
            chunks.append(self._drain(state))  # rotated: the rest of the old file first
        if state.handle is None:
            state.handle = open(state.path, "rb")  # noqa: SIM115 - kept open across polls
            state.inode = stat.st_ino
            skip = self.from_end and not state.seen
            state.offset = stat.st_size if skip else 0
            state.lines = None if skip and stat.st_size else 0
            state.seen = True
        if stat.st_size < state.offset:  # truncated in place
            state.offset = 0
            state.partial = b""
            state.lines = 0
        state.handle.seek(state.offset)
        data = state.handle.read()
        state.offset += len(data)
        chunks.append(self._numbered(state, self._complete(state, data)))
        return chunks

    def _drain(self, state: _Followed) -> Lines:
        if state.handle is None:
            return Lines()
        state.handle.seek(state.offset)
        data = state.handle.read()
        state.handle.close()
        state.handle = None
        tail = self._complete(state, data)
        rest, state.partial = state.partial, b""
        return self._numbered(state, tail + (rest + b"\n" if rest else b""))  # the old file is done

    @staticmethod
    def _numbered(state: _Followed, data: bytes) -> Lines:
        first = None if state.lines is None else state.lines + 1
        if state.lines is not None:
            state.lines += data.count(b"\n")
        return Lines.at(data, first)

    @staticmethod
    def _complete(state: _Followed, data: bytes) -> bytes:
        data = state.partial + data
        cut = data.rfind(b"\n") + 1
        state.partial = data[cut:]
        return data[:cut]

    def close(self) -> None:
        for state in self._files.values():
            if state.handle is not None:
                state.handle.close()
