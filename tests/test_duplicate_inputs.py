"""An input named twice, inside a folder also named, or copied under another name is read once."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import report_json

from specobs.ingest import load

LOG = Path(__file__).resolve().parents[1] / "examples" / "data" / "vllm-cpu-ngram-k3.log"


def _drafts(*paths) -> int:
    return int(load([str(p) for p in paths]).windows.collect()["num_drafts"].sum())


def test_the_same_file_twice_a_folder_and_its_file_and_a_copy_count_once(tmp_path):
    once = _drafts(LOG)
    assert once > 0
    folder = tmp_path / "logs"
    folder.mkdir()
    inside = folder / "server.log"
    shutil.copy(LOG, inside)
    (tmp_path / "copy.log").write_bytes(LOG.read_bytes())
    assert _drafts(LOG, LOG) == once
    assert _drafts(folder, inside) == once
    assert _drafts(LOG, tmp_path / "copy.log") == once
    # A different file of the same size is not a copy.
    changed = bytearray(LOG.read_bytes())
    changed[-2:-1] = b"\n" if changed[-2:-1] != b"\n" else b" "
    (tmp_path / "other.log").write_bytes(bytes(changed))
    assert _drafts(LOG, tmp_path / "other.log") > once


def test_the_report_says_what_it_read_once(tmp_path):
    data = report_json(str(LOG), str(LOG))
    assert [s["source"] for s in data["sources"]] == [str(LOG)]
    (why,) = [s["why"] for s in data["skipped_lines"]["examples"]]
    assert why == f"the same file as {LOG}: read once"
