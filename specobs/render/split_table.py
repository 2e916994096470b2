"""A split by context length, or side by side by environment, as a table and its findings (the
report and the recommendation both show it)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from specobs.records import Split
from specobs.render import sentences
from specobs.render.fit import Col, cols, print_table
from specobs.render.markdown import md_table


def split_cols(split: Split) -> list[Col]:
    """The value columns (kept), then the measures, least needed left out first on a narrow console."""
    values = [Col(name, 0, "text") for name in split.by]
    measures = cols(sentences.SPLIT_HEADERS[2:], (3, 0, 2, 4, 5, 5, 1, 3, 0, 4))
    return [*values, Col("target", 2, "text"), Col("k", 0, "text"), *measures]


def split_to_rich(split: Split, console: Console, *, table: bool = True) -> None:
    """The table (unless ``table`` is False: the findings alone), then the findings."""
    console.print()
    if table:
        print_table(console, split_cols(split), sentences.split_rows(split), sentences.split_title(split))
    for line in sentences.split_findings(split):
        console.print(Text(f"• {line}"))


def split_to_markdown(split: Split, *, table: bool = True) -> list[str]:
    parts = [""]
    if table:
        parts += [f"### {sentences.split_title(split)}", "",
                  *md_table(sentences.split_headers(split), sentences.split_rows(split)), ""]  # fmt: skip
    return parts + [f"- {line}" for line in sentences.split_findings(split)]


__all__ = ["split_cols", "split_to_markdown", "split_to_rich"]
