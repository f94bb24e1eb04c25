"""`python -m tuneplane.backends.local supervise RUN_DIR`: the detached supervisor of one local run."""

from __future__ import annotations

import sys
from pathlib import Path

from tuneplane.backends.local.supervisor import supervise
from tuneplane.constants import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, TERMINAL


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "supervise":
        print("usage: python -m tuneplane.backends.local supervise RUN_DIR", file=sys.stderr)
        return EXIT_USAGE
    state = supervise(Path(args[1]))
    return EXIT_OK if state.get("phase") in TERMINAL else EXIT_PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
