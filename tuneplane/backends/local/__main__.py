"""`python -m tuneplane.backends.local supervise RUN_DIR`: the detached supervisor of one local run."""

from __future__ import annotations

import sys
from pathlib import Path

from tuneplane.backends.local.supervisor import supervise
from tuneplane.constants import TERMINAL


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "supervise":
        print("usage: python -m tuneplane.backends.local supervise RUN_DIR", file=sys.stderr)
        return 2
    state = supervise(Path(args[1]))
    return 0 if state.get("phase") in TERMINAL else 1


if __name__ == "__main__":
    sys.exit(main())
