"""What to do when standard output goes away under a command: `tp … | head`, a full disk.

Standard library only: `tp` and the job-side `tuneplane-launch` both use it.
"""

from __future__ import annotations

import errno
import os
import select
import sys

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def stdout_closed(exc: BaseException) -> bool:
    """Whether `exc` is standard output's reader having gone (`tp methods | head` read what it wanted):
    a broken pipe, and fd 1 a pipe nobody reads any more. Then fd 1 is pointed at /dev/null, so the
    interpreter's own flush at exit does not fail a second time, and the caller ends quietly."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        gone = any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (OSError, ValueError):
        return False
    if gone:
        quiet_stdout()
    return gone


def quiet_stdout() -> None:
    """Point fd 1 at /dev/null (what is still buffered is dropped there, not raised at exit)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def print_or_quit(text: str, program: str) -> int:
    """`text` on standard output and 0; a reader that went away is 0 too (it had what it wanted), and a
    standard output that cannot take it (a full disk) is said on standard error, 1, never a traceback."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError as exc:
        if stdout_closed(exc):
            return 0
        quiet_stdout()
        sys.stderr.write(f"{program}: cannot write to standard output: {exc.strerror or exc}\n")
        return 1
    return 0
