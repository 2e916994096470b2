"""Bundling a recording: files gzipped byte-for-byte reproducibly (no name or time in the header),
so a re-recording with the same counts gives the same bundled bytes."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path


def gzip_file(path: Path, out: Path) -> None:
    """``path`` gzipped to ``out`` with an empty name and a zero mtime in the header."""
    with (
        open(path, "rb") as plain,
        open(out, "wb") as target,
        gzip.GzipFile(filename="", mode="wb", fileobj=target, mtime=0) as packed,
    ):
        shutil.copyfileobj(plain, packed)


def pack(folder: Path, pattern: str) -> None:
    """Every file of ``folder`` matching ``pattern`` replaced by its ``.gz`` (:func:`gzip_file`)."""
    for path in sorted(folder.glob(pattern)):
        gzip_file(path, path.with_name(path.name + ".gz"))
        path.unlink()


__all__ = ["gzip_file", "pack"]
