"""Rule `lint-checkpoint-dir`: weights written under the out dir but outside `checkpoints/` (a warning).

The platform collects weights from `$TUNEPLANE_OUT_DIR/checkpoints/*` (and an export from
`hf_export`), lists them in `artifacts.json` and resumes a new attempt from the newest one. A
Hugging Face `TrainingArguments`/TRL `*Config` whose `output_dir` is the out dir itself writes its
`checkpoint-<step>` folders beside `checkpoints/`, and a `torch.save` or `save_pretrained` to
`<out>/model.pt` does the same: the run succeeds with no artifact. The experiment's Python files are
read (never imported); the out dir is `os.environ["TUNEPLANE_OUT_DIR"]` (any lookup of it), a
parsed `--output-dir` argument (`args.output_dir`, which the platform sets to the out dir), or a name
assigned from either.
Passing: `SFTConfig(output_dir=os.path.join(args.output_dir, "checkpoints"))`.
Failing: `GRPOConfig(output_dir=args.output_dir)`, `torch.save(state, f"{out}/model.pt")`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import lru_cache

from tuneplane.check.rules.context import ExperimentContext
from tuneplane.check.rules.lint import code_files, read_code
from tuneplane.constants import OUT_DIR_ENV
from tuneplane.problems import Problem, Severity

RULE = "lint-checkpoint-dir"
OUT_ENV = OUT_DIR_ENV
OUT_ATTRIBUTE = "output_dir"  # argparse's name for --output-dir / --output_dir
_KEPT = re.compile(r"(^|[/\\])(checkpoints|hf_export)([/\\]|$)")  # where the platform collects weights
# callee → the keywords that name where it writes (its first path argument is positional `index`)
_SAVERS = {"save_pretrained": 0, "save_model": 0, "save_state": 0, "save_checkpoint": 0}
_PATH_KEYWORDS = ("save_directory", "output_dir", "path", "f")
ROOT, KEPT = "root", "kept"
MAX_ASSIGN_ROUNDS = 3  # a name assigned from a name assigned from the out dir, and so on


# where one finding is, what it says, and the hint: a Problem without its file
Finding = tuple[int, int, str, str]


def check(ctx: ExperimentContext) -> Iterator[Problem]:
    for path in code_files(ctx.dir):
        if path.suffix != ".py":
            continue
        rel = f"{ctx.rel}/{path.relative_to(ctx.dir).as_posix()}"
        for line, col, message, hint in _findings(read_code(path) or ""):
            yield Problem(rel, line, col, RULE, message, severity=Severity.WARNING, hint=hint)


@lru_cache(maxsize=64)
def _findings(text: str) -> tuple[Finding, ...]:
    """A file's findings, from its text alone. Experiments made from one template hold the same files,
    so a lab's are parsed once per text, not once per experiment."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()  # not Python we can read: rule `code` says so
    return tuple(_problems(tree))


def _problems(tree: ast.AST) -> Iterator[Finding]:
    names = _names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _callee(node)
        if callee.endswith(("Config", "Arguments")):
            yield from _config(node, callee, names)
        elif callee in _SAVERS or _is_torch_save(node):
            target = _save_target(node, callee)
            if target is not None and _kind(target, names) == ROOT:
                shown = "torch.save" if callee == "save" else callee
                yield _finding(
                    node,
                    f"{shown}() writes under $TUNEPLANE_OUT_DIR but outside checkpoints/: the platform "
                    "collects weights from checkpoints/* (and an export from hf_export), so the run keeps none",
                    'write them to a folder under "checkpoints/" of the out dir (a step number in its name '
                    "is recorded), e.g. os.path.join(out_dir, 'checkpoints', f'step-{step}')",
                )


def _config(node: ast.Call, callee: str, names: dict[str, str]) -> Iterator[Finding]:
    keywords = {k.arg: k for k in node.keywords if k.arg}
    output = keywords.get("output_dir")
    saves = keywords.get("save_strategy")
    if saves is not None and isinstance(saves.value, ast.Constant) and saves.value.value == "no":
        return  # it saves no checkpoint
    if output is not None and _kind(output.value, names) == ROOT:
        yield _finding(
            output,
            f"{callee}(output_dir=...) is the out dir itself: the Trainer writes its checkpoint-<step> "
            "folders there, outside checkpoints/, where the platform neither collects them nor resumes from them",
            'pass output_dir=os.path.join(<out dir>, "checkpoints") (logs can stay in logging_dir)',
        )


def _names(tree: ast.AST) -> dict[str, str]:
    """Names assigned (anywhere, in order) from the out dir (ROOT) or from a folder of it the platform
    collects (KEPT)."""
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
    names: dict[str, str] = {}
    for _ in range(MAX_ASSIGN_ROUNDS):
        for node in assigns:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assert node.value is not None
            kind = _kind(node.value, names)
            for target in targets:
                if isinstance(target, ast.Name) and kind:
                    names[target.id] = kind
    return names


def _kind(node: ast.AST, names: dict[str, str]) -> str:
    """KEPT when the path names checkpoints/ or hf_export, ROOT when it is built from the out dir."""
    root = False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            if _KEPT.search(sub.value):
                return KEPT
            root = root or sub.value == OUT_ENV
        elif isinstance(sub, ast.Name) and sub.id in names:
            if names[sub.id] == KEPT:
                return KEPT
            root = True
        elif isinstance(sub, ast.Attribute) and sub.attr == OUT_ATTRIBUTE:
            root = True
    return ROOT if root else ""


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def _is_torch_save(node: ast.Call) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and func.attr == "save" and _callee_root(func) == "torch"


def _callee_root(func: ast.Attribute) -> str:
    value: ast.expr = func.value
    while isinstance(value, ast.Attribute):
        value = value.value
    return value.id if isinstance(value, ast.Name) else ""


def _save_target(node: ast.Call, callee: str) -> ast.expr | None:
    """The argument that names where a save call writes."""
    for keyword in node.keywords:
        if keyword.arg in _PATH_KEYWORDS:
            return keyword.value
    index = 1 if callee == "save" else _SAVERS.get(callee, 0)  # torch.save(obj, f)
    return node.args[index] if len(node.args) > index else None


def _finding(node: ast.Call | ast.keyword, message: str, hint: str) -> Finding:
    return node.lineno, node.col_offset + 1, message, hint
