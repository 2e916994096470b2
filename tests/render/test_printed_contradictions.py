"""A log line whose printed mean acceptance length contradicts its own counts is reported."""

from __future__ import annotations

from support.helpers import report_json
from support.log_lines import CURRENT, DP_PAIRS


def _findings(write, text: str) -> list[str]:
    return report_json(str(write("a.log", text + "\n")))["findings"]


def test_a_printed_length_off_its_counts_is_a_finding(write):
    assert not any("contradict" in f for f in _findings(write, CURRENT))  # 3.46 is what its counts give
    assert not any("contradict" in f for f in _findings(write, DP_PAIRS))
    wrong = CURRENT.replace("Mean acceptance length: 3.46", "Mean acceptance length: 4.46")
    findings = _findings(write, wrong + "\n" + CURRENT)
    (finding,) = [f for f in findings if "contradict" in f]
    assert finding.startswith("1 window(s) print a mean acceptance length")
