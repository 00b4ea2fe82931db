"""Text from files, made safe to print: no terminal control codes, no rich markup.

Why: names come from user files and traces (a custom topology's name and device names, a
trace's process groups). A topology named "[/]" crashed rich's markup parser (a
traceback), and a name holding ESC sequences reached the terminal raw, where it can move
the cursor, recolour or clear the screen. Every such name is printed through `printable` (and, where rich renders it,
`simulator.outputs.render.markup_safe`).
"""

from __future__ import annotations


def printable(text: object) -> str:
    """`text` with every non-printable character (ESC, BEL, CR...) written as its escape
    (`\\x1b`), newlines and tabs as spaces: one line that shows what the file holds."""
    s = str(text).replace("\n", " ").replace("\t", " ")
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in s)
