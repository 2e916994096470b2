"""GitHub-flavoured Markdown pieces shared by the renderers."""

from __future__ import annotations

from collections.abc import Sequence


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A pipe table, one line per row (pipes inside cells escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
