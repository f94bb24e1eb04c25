"""What the CLI says to a person, in one place: results on standard output, notes, warnings and
errors on standard error, coloured only on a terminal.

Every command module prints through `say`, and hands it or its methods to library code that reports as
it goes (`echo=say.line`, `note=say.note`, `out=say.text`). `say` is a `runtime.reporter.Reporter`, the
type the layers below the CLI accept, so the bot's and the runs' messages go through it too; text a
program reads goes through `say.data` and `say.json`, never painted. Colour is on when
the stream is a terminal and `NO_COLOR` is unset (https://no-color.org); a pipe or a file gets none.
Without colour the text is exactly the same, byte for byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TextIO

from tuneplane.runtime.reporter import Reporter

RED, YELLOW, GREEN, RESET = "\033[31m", "\033[33m", "\033[32m", "\033[0m"
# a line's first word, as tp and its validate report write them, and its colour
PREFIXES = (("error:", RED), ("warning:", YELLOW), ("ok:", GREEN), ("internal error:", RED))
SEVERITIES = ((": error [", RED), (": warning [", YELLOW))  # file:line:col: error [rule] …


def colour_on(stream: TextIO) -> bool:
    """Colour for this stream: a terminal, `NO_COLOR` unset, TERM not dumb."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # a stream without a file, or a closed one
        return False


def paint(line: str) -> str:
    """`line` with its severity word coloured (the rest of the line as it is)."""
    for prefix, colour in PREFIXES:
        if line.startswith(prefix):
            return f"{colour}{prefix}{RESET}{line[len(prefix) :]}"
    for marker, colour in SEVERITIES:
        head, found, rest = line.partition(marker)
        if found:
            word = marker[2:-2]
            return f"{head}: {colour}{word}{RESET} [{rest}"
    return line


class TerminalReporter(Reporter):
    """The CLI's voice: `Reporter`'s streams, coloured on a terminal and in the edition's words."""

    # an edition's wording of tp's messages (the `sf` command's, tuneplane.cli.sf); None: as written
    translate: Callable[[str], str] | None = None

    def _write(self, stream: TextIO, text: str) -> None:
        if self.translate is not None:
            text = self.translate(text)
        if colour_on(stream):
            text = "".join(paint(line) for line in text.splitlines(keepends=True))
        super()._write(stream, text)

    def json(self, data: Any) -> None:
        """A result as JSON (never coloured: a program reads it)."""
        self.data(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


say = TerminalReporter()
