"""Tables that fit the console without cutting a number.

Rich shrinks every column of a table wider than the console and cuts what no longer fits with
an ellipsis (``4,8…``), numbers included. Here each column declares what it holds and how much
it matters (:class:`Col`), and :func:`print_table` lays the table out itself:

- a ``number`` column is exactly as wide as its widest cell (its header wraps at spaces), so a
  number is never cut nor wrapped;
- a ``text`` column wraps at spaces, and folds a word only when it is wider than the console
  leaves it;
- a ``path`` column keeps each path's end: ``…/data/vllm-cpu-sweep/specobs-sweep-ngram-p29587-0001.jsonl``
  (the file name whole, then as many folders before it as fit);
- when the columns' narrowest widths together exceed the console, the column with the largest
  ``priority`` goes first (the rightmost of equals), and so on; a line under the table names
  what was left out. Priority 0 is never left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

Kind = Literal["number", "text", "path", "bar"]

#: Rich's cell padding: one space each side of every column.
PADDING = 2
#: A text column does not go below this (or its longest word, if shorter) before others are left out.
TEXT_FLOOR = 16
#: A path column does not go below this (or its longest ``…/file name``, if shorter) before others are left out.
PATH_FLOOR = 24
#: Below this, a text or path column folds into pieces too small to read: the last resort stops here.
NARROWEST = 4
ELLIPSIS = "…"


@dataclass(frozen=True)
class Col:
    """One column: its header, what its cells hold and how much it matters on a narrow console."""

    header: str
    #: 0: always shown; a larger number is left out earlier when the console is too narrow.
    priority: int = 0
    #: ``number`` (never cut or wrapped), ``text`` (wraps), ``path`` (shortened from the left), ``bar``.
    kind: Kind = "number"
    #: Default: right for numbers, left otherwise.
    justify: Literal["left", "right"] | None = None
    #: Style of every cell (a bar's colour).
    style: str | None = None


def cols(headers: Sequence[str], priorities: Sequence[int], kinds: Sequence[Kind] | None = None) -> list[Col]:
    """Columns from parallel sequences (``kinds`` default to numbers)."""
    kinds = kinds or ["number"] * len(headers)
    return [Col(h, p, k) for h, p, k in zip(headers, priorities, kinds, strict=True)]


def shorten_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` cells, cut from the left at a ``/``: the file name stays
    whole (``…/name`` even when that is wider: it folds, it is not cut), and as many folders
    before it as fit."""
    if cell_len(path) <= width or "/" not in path.rstrip("/"):
        return path
    parts = path.split("/")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        longer = f"{part}/{kept}"
        if cell_len(ELLIPSIS + "/" + longer) > width:
            break
        kept = longer
    return f"{ELLIPSIS}/{kept}"


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _widest(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _need(col: Col, cells: Sequence[str], width: int) -> int:
    """The narrowest the column may be before columns are left out: a number's widest cell; a
    path's ``…/file name`` (up to half the console: then it folds); a text's longest word, up
    to :data:`TEXT_FLOOR` (except a word with a digit in it: it is not folded)."""
    header = _longest_word(col.header)
    if col.kind in ("number", "bar"):
        return max([header, *(_widest(c) for c in cells)])
    if col.kind == "path":
        ends = [cell_len(shorten_path(c, 1)) for c in cells]
        floor = max(PATH_FLOOR, width // 2)
        return max(min(max(ends, default=0), floor), min(header, floor), 1)
    words = max([header, *(_longest_word(c) for c in cells)])
    numbers = max((cell_len(w) for c in cells for w in c.split() if any(ch.isdigit() for ch in w)), default=0)
    return max(min(words, TEXT_FLOOR), numbers, 1)


def _most(col: Col, cells: Sequence[str]) -> int:
    """The width the column would take on a console wide enough."""
    return max([_widest(col.header), *(_widest(c) for c in cells), 1])


def layout(width: int, columns: Sequence[Col], rows: Sequence[Sequence[str]]) -> tuple[list[int], list[int]]:
    """``(indices of the columns shown, their content widths)`` for a console ``width`` wide."""
    shown = list(range(len(columns)))
    cells = [[row[i] for row in rows] for i in range(len(columns))]

    def room(indices: list[int]) -> int:  # content width left once padding and separators are paid
        return width - PADDING * len(indices) - max(len(indices) - 1, 0)

    need = {i: _need(columns[i], cells[i], width) for i in shown}
    while sum(need[i] for i in shown) > room(shown):
        droppable = [i for i in shown if columns[i].priority > 0]
        if not droppable:
            break
        shown.remove(max(reversed(droppable), key=lambda i: columns[i].priority))
    widths = {i: need[i] for i in shown}
    spare = room(shown) - sum(widths.values())
    flexible = [i for i in shown if columns[i].kind in ("text", "path")]
    if spare < 0:  # nothing left to leave out: narrow what wraps or folds, never a number
        for i in sorted(flexible, key=lambda i: -widths[i]):
            cut = min(-spare, widths[i] - NARROWEST)
            if cut > 0:
                widths[i] -= cut
                spare += cut
    most = {i: _most(columns[i], cells[i]) for i in flexible}
    while spare > 0:  # room to spare: what wraps or folds grows towards its natural width, in turn
        growing = [i for i in flexible if widths[i] < most[i]]
        for i in growing[:spare]:
            widths[i] += 1
        spare -= len(growing[:spare])
        if not growing:
            break
    return shown, [widths[i] for i in shown]


def fitted(
    width: int, columns: Sequence[Col], rows: Sequence[Sequence[str | Text]], title: str | None = None
) -> tuple[Table, list[str]]:
    """The table laid out for ``width`` cells, and the headers of the columns left out."""
    plain = [[_plain(c) for c in row] for row in rows]
    shown, widths = layout(width, columns, plain)
    table = Table(title=title, title_justify="left", show_edge=False)
    for i, w in zip(shown, widths, strict=True):
        col = columns[i]
        justify = col.justify or ("right" if col.kind == "number" else "left")
        table.add_column(col.header, justify=justify, width=w, overflow="fold", style=col.style)
    for row in rows:
        row = _keep_row_name(row, shown)
        cells: list[str | Text] = []
        for i, w in zip(shown, widths, strict=True):
            cell = row[i]
            if columns[i].kind == "path":
                cell = shorten_path(_plain(cell), w)
            cells.append(cell if isinstance(cell, Text) else Text(cell))
        table.add_row(*cells)
    left_out = [columns[i].header for i in range(len(columns)) if i not in shown]
    return table, left_out


def _keep_row_name(row: Sequence[str | Text], shown: Sequence[int]) -> list[str | Text]:
    """A row named in a column that was left out (the overall row's ``all``) keeps its name in
    the first column shown, when that cell is empty."""
    row = list(row)
    if shown and shown[0] > 0 and _plain(row[0]) and not _plain(row[shown[0]]):
        row[shown[0]] = row[0]
    return row


def left_out_line(left_out: Sequence[str], width: int) -> str:
    """Under a table that could not show every column."""
    return f"Left out to fit {width} columns: {', '.join(left_out)} (a wider terminal or --format markdown shows them)."


def print_table(
    console: Console, columns: Sequence[Col], rows: Sequence[Sequence[str | Text]], title: str | None = None
) -> None:
    """Print the table fitted to the console, with a line naming any column left out."""
    table, left_out = fitted(console.width, columns, rows, title)
    console.print(table)
    if left_out:
        console.print(Text(left_out_line(left_out, console.width), style="dim"))


__all__ = ["Col", "cols", "fitted", "layout", "left_out_line", "print_table", "shorten_path"]
