"""`python -m tuneplane.collector`: collect native metric files of one job's out dir."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import FrameType

from tuneplane.collector import sources, state
from tuneplane.collector.run import STATE_DIR, Collector, describe, follow
from tuneplane.collector.sink import ReportSink
from tuneplane.constants import METRICS_NATIVE_ENV, OUT_DIR_ENV


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tuneplane.collector", description=__doc__)
    parser.add_argument(
        "--out-dir", default=os.environ.get(OUT_DIR_ENV, ""), help="the job's out dir (default $TUNEPLANE_OUT_DIR)"
    )
    parser.add_argument(
        "--sources",
        default=os.environ.get(METRICS_NATIVE_ENV, ""),
        help=f"the declaration as a JSON list (default ${METRICS_NATIVE_ENV})",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one pass, then exit (the default)")
    mode.add_argument("--follow", action="store_true", help="keep tailing until stopped or the parent exits")
    parser.add_argument(
        "--final", action="store_true", help="the job is over: a last line without its newline is complete"
    )
    parser.add_argument("--parent", type=int, default=0, help="with --follow: stop when this process is gone")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between passes with --follow")
    parser.add_argument(
        "--lock-timeout", type=float, default=60.0, help="how long to wait for another collector of the same out dir"
    )
    parser.add_argument("--flush-timeout", type=float, default=30.0)
    parser.add_argument("--stats", action="store_true", help="print what was collected as JSON on stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.out_dir or not os.path.isdir(args.out_dir):
        _say(f"no out dir to collect from ({args.out_dir or 'TUNEPLANE_OUT_DIR is not set'})")
        return 2
    problem = state.dir_problem(args.out_dir, STATE_DIR)
    if problem:
        _say(problem)
        return 2
    try:
        declared = sources.parse(args.sources)
    except sources.SourceError as exc:
        _say(f"{exc}; collecting only what the SDK left behind")
        declared = []
    stop = _Stop(args.parent)
    signal.signal(signal.SIGTERM, stop.handle)
    signal.signal(signal.SIGINT, stop.handle)
    sink = ReportSink()
    if not sink.start():
        return 0  # reporting is off for this job: nothing to send to
    collector = Collector(args.out_dir, sink, declared, flush_timeout=args.flush_timeout, final=args.final)
    try:
        locked = collector.lock(args.lock_timeout, stop)
    except OSError as exc:  # `.tuneplane` or its lock is not what the collector made (a file, a folder)
        sink.close()
        _say(
            f"cannot lock {exc.filename or collector.state_path}: {exc.strerror or exc}; remove it, the "
            "collector makes it again"
        )
        return 2
    if not locked:
        _say("another collector holds this out dir; leaving it to that one")
        return 0
    try:
        collector.load()
        if args.follow:
            follow(collector, args.interval, stop)
        else:
            collector.pass_once()
    finally:
        sink.close()
        collector.unlock()
    for problem in collector.problems:
        _say(problem)
    if collector.counts:
        _say("skipped: " + ", ".join(f"{why}: {n}" for why, n in sorted(collector.counts.items())))
    if args.stats:
        print(json.dumps({**describe(collector), "report": sink.stats()}))
    return 0


class _Stop:
    def __init__(self, parent: int) -> None:
        self.parent = parent
        self.flag = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.flag = True

    def __call__(self) -> bool:
        if self.flag:
            return True
        if self.parent and os.getppid() != self.parent:
            return True  # reparented: the job is over
        return False


def _say(message: str) -> None:
    print(f"tuneplane.collector: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
