"""Text as log agents ship it, made plain: colour codes, byte-order marks, carriage returns and other control
characters are taken out before a line is parsed, and before anything derived from it reaches a terminal."""

from __future__ import annotations

import re

# ANSI escape sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks, clipboard) and two-byte escapes.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# C0 and C1 controls but tab and newline, DEL, byte-order marks, zero-width and bidirectional marks.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def clean(message: str) -> str:
    """A log event's message with its escapes and controls taken out; CR and CRLF line ends become newlines."""
    text = ANSI.sub("", message).replace("\r\n", "\n").replace("\r", "\n")
    return CONTROL.sub("", text)


def printable(text: str) -> str:
    """`clean`, on one line: safe to print in a terminal cell (newlines and tabs become spaces)."""
    return " ".join(clean(text).replace("\t", " ").splitlines()) if text else text


def single_spaced(text: str) -> str:
    """White space runs as one space, ends trimmed: what rules match a record's message against."""
    return " ".join(text.split())
