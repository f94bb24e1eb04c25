"""Rule `launch-zero-procs`: a launch line whose process count can be 0.

`TUNEPLANE_CLUSTER_GPUS_PER_NODE` is the GPU count, so it is 0 on a profile without GPUs (the local
profile of a CPU machine), and a process count taken from it means something else to each launcher:
`torchrun --nproc_per_node 0` starts no process and stops on a bare `AssertionError`;
`accelerate launch --num_processes 0` starts one plain, non-distributed process whatever the run
asked for (`--profile local:4` still gets one). `$TUNEPLANE_CLUSTER_PROCS_PER_NODE` is the GPU count
on GPU profiles and the process count of a CPU run (`--profile local:N`, 1 by default), never 0.
`tp validate` warns when the lab has a profile without GPUs, and reports a run request on such a
profile whose launch would start no process as the error `tp submit` and the bot refuse it with.
Passing: `exec torchrun --nproc_per_node "$TUNEPLANE_CLUSTER_PROCS_PER_NODE" "$TUNEPLANE_EXP_DIR/train.py"`.
Failing: `exec torchrun --nproc_per_node "$TUNEPLANE_CLUSTER_GPUS_PER_NODE" …` in a lab with a 0-GPU profile.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.check.rules.entrypoint import own_entrypoint, resolve_entrypoint
from tuneplane.constants import GPUS_PER_NODE_ENV, PROCS_PER_NODE_ENV
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.launchline import strip_comment
from tuneplane.runtime.records import FrozenRecord

if TYPE_CHECKING:  # the run-request rules load only when requests are checked
    from tuneplane.check.rules.runs import RunContext

RULE = "launch-zero-procs"
SCRIPTS = ("train.sh", "train.py")
MAX_BYTES = 512 * 1024
GPUS = GPUS_PER_NODE_ENV
PROCS = PROCS_PER_NODE_ENV
# a process-count flag whose value (quoted or not, maybe arithmetic) is built from the GPU count
_COUNT = re.compile(r"--(nproc[-_]per[-_]node|num[-_]processes|nproc)[ =]+(?:\"[^\"]*|'[^']*|\S*)" + GPUS + r"\b")
FIX = (
    f'pass "${{{PROCS}}}" instead: the GPU count on a GPU profile, N on --profile local:N '
    f"(1 on local), never 0 (on a platform that does not set it: "
    f'"${{{PROCS}:-${GPUS}}}")'
)


class Launcher(FrozenRecord):
    name: str
    with_zero: str  # what it does when told to start 0 processes (torch 2.13, accelerate 1.16)
    starts_nothing: bool


TORCHRUN = Launcher("torchrun", "starts no process and stops on a bare AssertionError", True)
ACCELERATE = Launcher(
    "accelerate launch", "starts one plain process, not distributed, whatever the run asked for", False
)


class ZeroCount(FrozenRecord):
    line: int
    col: int
    flag: str
    launcher: Launcher


def zero_counts(text: str, shell: bool) -> list[ZeroCount]:
    """Every process-count flag of `text` taken from the GPU count (not a PROCS fallback to it)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = strip_comment(line) if shell else line
        for m in _COUNT.finditer(code):
            if PROCS in m.group(0):  # `${PROCS:-$GPUS}`: the GPU count only where PROCS is not set
                continue
            flag = m.group(1)
            launcher = ACCELERATE if flag.startswith("num") else TORCHRUN
            found.append(ZeroCount(number, m.start() + 1, flag, launcher))
    return found


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    settings = ctx.lab.settings
    empty = sorted(name for name, p in settings.profiles.items() if p.gpus_per_node == 0) if settings else []
    if not empty:
        return
    for name in SCRIPTS:
        text = _read(ctx.dir / name)
        if text is None:
            continue
        for found in zero_counts(text, shell=name.endswith(".sh")):
            yield Problem(
                f"{ctx.rel}/{name}",
                found.line,
                found.col,
                RULE,
                _message(found, ", ".join(empty))
                + ("; `tp submit` refuses such a run" if found.launcher.starts_nothing else ""),
                severity=Severity.WARNING,
                hint=FIX,
            )


def check_run(ctx: RunContext) -> Iterator[Problem]:
    """A run request whose profile leaves the launch line 0 processes: the error `tp submit` and the bot
    refuse it with, placed at its `profile`."""
    data = ctx.doc.data
    if not isinstance(data, dict) or data.get("operation", "train") != "train":
        return
    profile, entrypoint = data.get("profile"), own_entrypoint(ctx.experiment)
    if not isinstance(profile, str) or entrypoint is None:
        return
    # lazy: profiles are parsed only for run requests, which `tp validate EXP` does not load
    from tuneplane.check.shapes import ShapeError, parse_profile

    try:
        shape = parse_profile(profile, ctx.lab.config)
    except ShapeError:
        return  # rule run-profile says why
    exp = ctx.experiment
    found = zero_process_launch(exp.dir, exp.rel, entrypoint, shape.gpus_per_node, shape.profile)
    if found is not None:
        yield ctx.doc.problem("/profile", RULE, f"{found.location()}: {found.message}", hint=found.hint)


def zero_process_launch(exp_dir: Path, rel: str, entrypoint: str, gpus_per_node: int, profile: str) -> Problem | None:
    """The launch line of the job's own shell entrypoint that would start no process on this run's
    profile (an error: the job could only fail), else None."""
    if gpus_per_node != 0 or not entrypoint.endswith(".sh"):
        return None
    real = resolve_entrypoint(exp_dir, entrypoint)  # a link inside the experiment is a fine entrypoint
    text = _read(real) if real is not None else None
    for found in zero_counts(text or "", shell=True):
        if found.launcher.starts_nothing:
            return Problem(f"{rel}/{entrypoint}", found.line, found.col, RULE, _message(found, profile), hint=FIX)
    return None


def _message(found: ZeroCount, profiles: str) -> str:
    launcher = found.launcher
    return (
        f"{launcher.name}'s --{found.flag} takes ${GPUS}, which is 0 on profile {profiles}: "
        f"with 0, {launcher.name} {launcher.with_zero}"
    )


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
