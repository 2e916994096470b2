"""What a vLLM log says its speculative config was."""

from __future__ import annotations

import ast
import re
from pathlib import Path


def shown_in_log(path: Path) -> list[dict]:
    """The ``speculative_config`` of every ``non-default args`` line, read here on its own."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        found = re.search(r"non-default args: (\{.*\})\s*$", line)
        if found and "speculative_config" in found.group(1):
            out.append(ast.literal_eval(found.group(1))["speculative_config"])
    return out
