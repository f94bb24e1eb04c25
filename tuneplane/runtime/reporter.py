"""What tp says to a person, as one type every layer may accept: `Reporter`, and `Echo`, one of its
methods handed to code that reports line by line.

The CLI's reporter (`tuneplane.cli.say.say`) is a `Reporter` that adds colour on a terminal and the
StarForge edition's words; `runs/`, `bot/` and `ingest/` sit below the CLI and cannot import it, so
they take a `Reporter` or one of its methods from their caller, and default to `plain`: the same
streams, never coloured. Standard library only, like the rest of `runtime`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

Echo = Callable[[str], None]
"""One line for a person, as a reporter's method says it (`say.line`, `plain.note`)."""


class Reporter:
    """Results on standard output; notes, warnings and errors on standard error. The streams are looked up
    on every call, so a test's captured streams and a redirected process's apply."""

    def _write(self, stream: TextIO, text: str) -> None:
        """Where every message for a person goes (a subclass paints or translates it here)."""
        stream.write(text)
        stream.flush()

    def line(self, text: str = "") -> None:
        """A line of the command's result (standard output)."""
        self._write(sys.stdout, f"{text}\n")

    def text(self, text: str) -> None:
        """Text already ending as it should (a rendered manifest, a report), to standard output."""
        self._write(sys.stdout, text)

    def data(self, text: str) -> None:
        """Text a program reads (JSON, GitHub's annotations), to standard output exactly as given: never
        painted nor translated, whichever reporter says it."""
        sys.stdout.write(text)
        sys.stdout.flush()

    def note(self, text: str) -> None:
        """A line about the work, not its result (standard error)."""
        self._write(sys.stderr, f"{text}\n")

    def warn(self, text: str) -> None:
        """`warning: TEXT` on standard error."""
        self._write(sys.stderr, f"warning: {text}\n")

    def error(self, text: str) -> None:
        """`error: TEXT` on standard error."""
        self._write(sys.stderr, f"error: {text}\n")


plain = Reporter()
"""The reporter of code run without the CLI (a library call, a test, a detached run owner)."""
