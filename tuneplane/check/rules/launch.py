"""Rule `launch-zero-procs`: a launch line whose process count can be 0 (a warning).

A process count taken from the GPU count starts nothing on a profile without GPUs: the seed's
`torchrun --nproc_per_node "$TUNEPLANE_CLUSTER_GPUS_PER_NODE"` fails at once on the local profile.
`$TUNEPLANE_CLUSTER_PROCS_PER_NODE` is the GPU count on GPU profiles and the process count of a CPU run
(`--profile local:N`), never 0.
Passing: `exec torchrun --nproc_per_node "$TUNEPLANE_CLUSTER_PROCS_PER_NODE" "$TUNEPLANE_EXP_DIR/train.py"`.
Failing: `exec torchrun --nproc_per_node "$TUNEPLANE_CLUSTER_GPUS_PER_NODE" …` in a lab with a 0-GPU profile.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.problems import Problem, Severity

SCRIPTS = ("train.sh", "train.py")
MAX_BYTES = 512 * 1024
# a process-count flag whose value (quoted or not, maybe arithmetic) is built from the GPU count
_COUNT = re.compile(
    r"--(nproc[-_]per[-_]node|num[-_]processes|nproc)[ =]+(?:\"[^\"]*|'[^']*|\S*)"
    r"TUNEPLANE_CLUSTER_GPUS_PER_NODE\b"
)


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    settings = ctx.lab.settings
    empty = sorted(name for name, p in settings.profiles.items() if p.gpus_per_node == 0) if settings else []
    if not empty:
        return
    for name in SCRIPTS:
        path = ctx.dir / name
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        yield from _lines(f"{ctx.rel}/{name}", text, shell=name.endswith(".sh"), profiles=empty)


def _lines(rel: str, text: str, shell: bool, profiles: list[str]) -> Iterator[Problem]:
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if shell else line
        for m in _COUNT.finditer(code):
            yield Problem(
                rel,
                number,
                m.start() + 1,
                "launch-zero-procs",
                f"--{m.group(1)} takes $TUNEPLANE_CLUSTER_GPUS_PER_NODE, which is 0 on profile "
                f"{', '.join(profiles)}: the launcher would start no process",
                severity=Severity.WARNING,
                hint='use "$TUNEPLANE_CLUSTER_PROCS_PER_NODE": the GPU count on GPU profiles, the '
                "process count of a CPU run (--profile local:N) on this machine",
            )
