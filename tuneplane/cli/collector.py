"""How a `tp` process uses Python's cyclic garbage collector.

A command makes most of its objects up front, importing Typer, pydantic, the models and the rest of its
pipeline, and keeps them until it exits. The collector, at Python's defaults, walks them again and again
and finds nothing, then walks them all once more as the interpreter shuts down: work a short command
pays for nothing (bench/validate.py measures `tp validate EXP` with and without it).
"""

import gc
import sys

# Young objects the collector lets pile up before a pass: Python's default is 700.
YOUNG_PASS_EVERY = 50_000


def collect_less_often() -> None:
    """Run the young pass every 50,000 new objects. That still bounds the garbage a long command (the
    bot, the ingest receiver) can leave. The older generations keep their own thresholds. Call it only
    in a process that is `tp`: an embedding program or a test calling `run(argv)` keeps its setting."""
    _young, *older = gc.get_threshold()
    gc.set_threshold(YOUNG_PASS_EVERY, *older)


class PausedWhileLoading:
    """`with PausedWhileLoading("tuneplane.check.validate"): <the command's lazy imports>`.

    The first time a process imports a command's pipeline, the import runs with the collector paused.
    Everything that exists then (modules, classes, functions, compiled patterns, the parsed command
    line) is frozen: no later pass walks it, nor the passes at shutdown. Use it before the command
    opens or reads anything: what the command makes afterwards is collected as usual. A process that
    imported the pipeline before (a test, an embedding program), or one whose collector is off, is left
    as it is."""

    __slots__ = ("first_module", "paused")

    def __init__(self, first_module: str) -> None:
        self.first_module = first_module  # the pipeline's module whose presence says "imported before"
        self.paused = False

    def __enter__(self) -> None:
        self.paused = gc.isenabled() and self.first_module not in sys.modules
        if self.paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.paused:
            gc.freeze()
            gc.enable()
