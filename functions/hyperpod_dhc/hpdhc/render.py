"""Plain-text rendering shared by every command: aligned tables, durations and timestamps."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TextIO

from hyperpod_dhc.deephealth.evidence.text import clean, printable


class Terminal:
    """Standard output for what commands print: escape sequences and control characters are taken out (a result
    line, and so an API answer, may carry any its writer put in it); `raw` writes the commands' own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(clean(text))

    def raw(self, text: str) -> int:
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def table(rows: list[list[str]], out: TextIO) -> None:
    """Left-aligned columns, two spaces apart, the first row a header underlined with dashes."""
    rows = [[printable(cell) for cell in row] for row in rows]  # one line per row, whatever a cell holds
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths), file=out)


def hm(seconds: float | None) -> str:
    """A duration as hours and minutes: `2h05`; `-` for none."""
    if seconds is None:
        return "-"
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}"


def when(epoch: float | None) -> str:
    """A UTC timestamp to the minute: `2026-12-03 14:05`; `-` for none."""
    return "-" if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M")
