"""Rule `lint-*`: the troubleshooting table, caught before the job runs (warnings).

Each pattern below is a symptom people hit an hour into a job:
- `lint-scaffold`: train.sh still ends in the scaffold's `no training command yet` line.
- `lint-output-dir`: writing to `./checkpoints`, a relative output dir, or `/tmp` → lost on exit.
- `lint-hardcoded-gpus`: `--nproc_per_node 8` instead of `"${TUNEPLANE_CLUSTER_GPUS_PER_NODE}"`.
- `lint-exec`: a launcher started without `exec`, so cancel and timeout signals miss the trainer.
- `lint-legacy-env`: a StarForge name (`FORGE_OUT_DIR`, `STARFORGE_TOKEN`, `starforge.report`) that
  no TunePlane job sets.
Passing: `exec torchrun --nproc_per_node "${TUNEPLANE_CLUSTER_GPUS_PER_NODE}" "${TUNEPLANE_EXP_DIR}/train.py"`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.starforge import ENV_RENAMES
from tuneplane.problems import Problem, Severity

SCRIPTS = ("train.sh", "train.py")
MAX_LINT_BYTES = 512 * 1024

_SCAFFOLD = re.compile(r"no training command yet")
_LAUNCH = re.compile(r"^\s*(python3?|torchrun|accelerate\s+launch|deepspeed|srun|uv\s+run)\b")
_GPUS = re.compile(r"--(nproc[-_]per[-_]node|num[-_]processes|nnodes|num[-_]machines|gpus)[ =]+['\"]?(\d+)")
_REL_OUT = re.compile(r"(?<![\w$}/])(\./(checkpoints|outputs?|ckpt)\b|/tmp/)")
_LEGACY = re.compile(r"\b(FORGE_[A-Z_]+|STARFORGE_[A-Z_]+|starforge\.report)\b")
_OUT_FLAG = re.compile(r"--(output[-_]dir|save[-_]dir|checkpoint[-_]dir)[ =]+['\"]?(?![\"'$])([^\s\"']+)")


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    for name in SCRIPTS:
        path = ctx.dir / name
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_LINT_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        yield from lint_script(f"{ctx.rel}/{name}", text, shell=name.endswith(".sh"))


def lint_script(rel: str, text: str, shell: bool) -> Iterator[Problem]:
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if shell else line
        if not code.strip():
            continue
        yield from _line(rel, number, line, code, shell)


def _warn(rel: str, line: int, col: int, rule: str, message: str, hint: str) -> Problem:
    return Problem(rel, line, col, rule, message, severity=Severity.WARNING, hint=hint)


def _line(rel: str, n: int, line: int | str, code: str, shell: bool) -> Iterator[Problem]:
    if shell and _SCAFFOLD.search(code):
        yield _warn(rel, n, 1, "lint-scaffold", "train.sh is still the scaffold: the job will stop at once "
                    "with `no training command yet`", "replace this line with your launch command, "
                    'e.g. exec python "${TUNEPLANE_EXP_DIR}/train.py" --output-dir "${TUNEPLANE_OUT_DIR}"')
        return
    for m in _GPUS.finditer(code):
        yield _warn(rel, n, m.start() + 1, "lint-hardcoded-gpus",
                    f"--{m.group(1)} is hard-coded to {m.group(2)}",
                    'pass "${TUNEPLANE_CLUSTER_GPUS_PER_NODE}" (or _NUM_NODES): the job gets the GPUs its '
                    "profile allots, and taking more gets it stopped")
    flagged = set()
    for m in _REL_OUT.finditer(code):
        flagged.add(m.start())
        yield _out_warning(rel, n, m.start() + 1, m.group(0))
    for m in _OUT_FLAG.finditer(code):
        if m.start(2) in flagged:  # the value itself was already reported
            continue
        if not m.group(2).startswith(("${TUNEPLANE_OUT_DIR", "$TUNEPLANE_OUT_DIR")):
            yield _out_warning(rel, n, m.start() + 1, m.group(0))
    for m in _LEGACY.finditer(code):
        yield _legacy_warning(rel, n, m.start() + 1, m.group(1))
    if shell and _LAUNCH.match(code):
        yield _warn(rel, n, 1, "lint-exec", "the launcher is not started with `exec`",
                    "prefix it with `exec` so cancel and timeout signals reach the trainer and its exit "
                    "code becomes the job's")


def _legacy_warning(rel: str, n: int, col: int, name: str) -> Problem:
    new = "tuneplane.report" if name == "starforge.report" else ENV_RENAMES.get(name)
    return _warn(rel, n, col, "lint-legacy-env", f"{name} is a StarForge name that TunePlane jobs do not set",
                 f"use {new}" if new else "remove it: it has no TunePlane equivalent")


def _out_warning(rel: str, n: int, col: int, what: str) -> Problem:
    return _warn(rel, n, col, "lint-output-dir", f"{what.strip()!r} is outside $TUNEPLANE_OUT_DIR: files "
                 "written there vanish when the job's container exits",
                 'write under "${TUNEPLANE_OUT_DIR}" (checkpoints in "${TUNEPLANE_OUT_DIR}/checkpoints")')
