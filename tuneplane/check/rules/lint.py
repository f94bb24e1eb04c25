"""Rule `lint-*`: the troubleshooting table, caught before the job runs (warnings).

Each pattern below is a symptom people hit an hour into a job:
- `lint-scaffold`: train.sh still ends in the scaffold's `no training command yet` line.
- `lint-output-dir`: writing to `./checkpoints`, a relative output dir, or `/tmp` → lost on exit.
- `lint-hardcoded-gpus`: `--nproc_per_node 8` instead of `"${TUNEPLANE_CLUSTER_PROCS_PER_NODE}"`.
- `lint-exec`: a launcher started without `exec`, so cancel and timeout signals miss the trainer.
- `lint-legacy-env`: a StarForge name (`FORGE_OUT_DIR`, `STARFORGE_TOKEN`, `starforge.report`,
  `StarForgeCallback`, in any case) in any Python or shell file of the experiment or of the lab's
  shared code: no TunePlane job sets or ships it, so the job dies with `ImportError` or reads nothing.
Prose is not code: comments and docstrings are never linted (`--output-dir --overrides-json` in a
module docstring is documentation, not a path).
Passing: `exec torchrun --nproc_per_node "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" "${TUNEPLANE_EXP_DIR}/train.py"`.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.lab.load import Lab
from tuneplane.lab.starforge import LEGACY, find_uses
from tuneplane.problems import Problem, Severity
from tuneplane.runtime.launchline import strip_comment

SCRIPTS = ("train.sh", "train.py")
CODE_SUFFIXES = (".py", ".sh", ".bash")
MAX_LINT_BYTES = 512 * 1024
MAX_LINT_FILES = 500  # per experiment or shared-code folder

_SCAFFOLD = re.compile(r"no training command yet")
_LAUNCH = re.compile(r"^\s*(python3?|torchrun|accelerate\s+launch|deepspeed|srun|uv\s+run)\b")
_GPUS = re.compile(r"--(nproc[-_]per[-_]node|num[-_]processes|nnodes|num[-_]machines|gpus)[ =]+['\"]?(\d+)")
_REL_OUT = re.compile(r"(?<![\w$}/])(\./(checkpoints|outputs?|ckpt)\b|/tmp/)")
# where a /tmp path on the line is searched for code (PYTHONPATH=/tmp/deps, sys.path.insert(0, "/tmp/x")),
# not written to: nothing is lost with the container
_SEARCH_PATH = re.compile(
    r"""(\b\w*PATH\s*=\s*["']?[^\s"';]*|\bsys\.path\.(insert|append)\([^)]*|PATH["']\]\s*=\s*["']?[^\s"']*)$"""
)
_OUT_FLAG = re.compile(r"--(output[-_]dir|save[-_]dir|checkpoint[-_]dir)[ =]+['\"]?(?![\"'$-])([^\s\"']+)")


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    for path in code_files(ctx.dir):
        rel = path.relative_to(ctx.dir).as_posix()
        text = read_code(path)
        if text is None:
            continue
        shown = f"{ctx.rel}/{rel}"
        if rel in SCRIPTS:
            yield from lint_script(shown, text, shell=rel.endswith(".sh"))
        else:
            yield from lint_legacy(shown, text, shell=not rel.endswith(".py"))


def code_files(base: Path) -> list[Path]:
    """The Python and shell files under `base`, sorted, bounded, never through a symlink."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        found += [Path(dirpath) / n for n in sorted(filenames) if n.endswith(CODE_SUFFIXES)]
        if len(found) >= MAX_LINT_FILES:
            break
    return [p for p in found[:MAX_LINT_FILES] if p.is_file() and not p.is_symlink()]


def read_code(path: Path) -> str | None:
    """The file's text, or None when it is too big to lint or not UTF-8 text."""
    try:
        if path.stat().st_size > MAX_LINT_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def lint_script(rel: str, text: str, shell: bool) -> Iterator[Problem]:
    for number, code in enumerate(code_lines(text, shell), 1):
        if code.strip():
            yield from _line(rel, number, code, code, shell)


def lint_legacy(rel: str, text: str, shell: bool) -> Iterator[Problem]:
    """Only `lint-legacy-env`, for the experiment's other files and the lab's shared code."""
    for number, code in enumerate(code_lines(text, shell), 1):
        for m in LEGACY.finditer(code):
            yield _legacy_warning(rel, number, m.start() + 1, code, m.start())


@lru_cache(maxsize=64)
def code_lines(text: str, shell: bool) -> tuple[str, ...]:
    """The lines of `text` with comments (and Python docstrings) blanked, columns kept. Several rules
    read the same file, and a lab's experiments hold their template's: each text is tokenized once."""
    lines = text.splitlines()
    if shell:
        return tuple(strip_comment(line) for line in lines)
    return tuple(_python_code(text, lines))


def _python_code(text: str, lines: list[str]) -> list[str]:
    out = [list(line) for line in lines]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return lines  # not Python we can read: lint every character rather than none
    starts_statement = True
    for index, tok in enumerate(tokens):
        prose = tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING
            and starts_statement
            and tokens[index + 1].type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.COMMENT)
        )
        if prose:
            _blank(out, tok.start, tok.end)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            starts_statement = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    return ["".join(chars) for chars in out]


def _blank(out: list[list[str]], start: tuple[int, int], end: tuple[int, int]) -> None:
    for row in range(start[0], min(end[0], len(out)) + 1):
        chars = out[row - 1]
        first = start[1] if row == start[0] else 0
        last = end[1] if row == end[0] else len(chars)
        for col in range(first, min(last, len(chars))):
            chars[col] = " "


def _warn(rel: str, line: int, col: int, rule: str, message: str, hint: str) -> Problem:
    return Problem(rel, line, col, rule, message, severity=Severity.WARNING, hint=hint)


def _line(rel: str, n: int, line: int | str, code: str, shell: bool) -> Iterator[Problem]:
    if shell and _SCAFFOLD.search(code):
        yield _warn(
            rel,
            n,
            1,
            "lint-scaffold",
            "train.sh is still the scaffold: the job will stop at once with `no training command yet` (exit 1)",
            "replace this line with your launch command, "
            'e.g. exec python "${TUNEPLANE_EXP_DIR}/train.py" --output-dir "${TUNEPLANE_OUT_DIR}"',
        )
        return
    for m in _GPUS.finditer(code):
        yield _warn(
            rel,
            n,
            m.start() + 1,
            "lint-hardcoded-gpus",
            f"--{m.group(1)} is hard-coded to {m.group(2)}",
            'pass "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" (or _NUM_NODES): the job gets the processes its '
            "profile allots, and taking more gets it stopped",
        )
    flagged = set()
    for m in _REL_OUT.finditer(code):
        flagged.add(m.start())
        if not _SEARCH_PATH.search(code[: m.start()]):
            yield _out_warning(rel, n, m.start() + 1, m.group(0))
    for m in _OUT_FLAG.finditer(code):
        if m.start(2) in flagged:  # the value itself was already reported
            continue
        if not m.group(2).startswith(("${TUNEPLANE_OUT_DIR", "$TUNEPLANE_OUT_DIR")):
            yield _out_warning(rel, n, m.start() + 1, m.group(0))
    for m in LEGACY.finditer(code):
        yield _legacy_warning(rel, n, m.start() + 1, code, m.start())
    if shell and _LAUNCH.match(code):
        yield _warn(
            rel,
            n,
            1,
            "lint-exec",
            "the launcher is not started with `exec`",
            "prefix it with `exec` so cancel and timeout signals reach the trainer and its exit code becomes the job's",
        )


def _legacy_warning(rel: str, n: int, col: int, code: str, start: int) -> Problem:
    [use] = find_uses(code[start:])[:1]
    return _warn(
        rel,
        n,
        col,
        "lint-legacy-env",
        f"{use.name} is a StarForge name that TunePlane jobs do not set or ship",
        use.advice,
    )


def _out_warning(rel: str, n: int, col: int, what: str) -> Problem:
    return _warn(
        rel,
        n,
        col,
        "lint-output-dir",
        f"{what.strip()!r} is outside $TUNEPLANE_OUT_DIR: files written there vanish when the job's container exits",
        'write under "${TUNEPLANE_OUT_DIR}" (checkpoints in "${TUNEPLANE_OUT_DIR}/checkpoints")',
    )


def lint_shared_code(lab: Lab) -> list[Problem]:
    """`lint-legacy-env` over the lab's shared code folders (they ship with every job)."""
    out: list[Problem] = []
    for folder in lab.config.shared_code:
        base = lab.root / folder
        if not base.is_dir() or base.is_symlink():
            continue
        for path in code_files(base):
            text = read_code(path)
            if text is not None:
                out += lint_legacy(lab.rel(path), text, shell=path.suffix != ".py")
    return out
