"""Every hint leads somewhere: each command a problem's hint names, run on the situation that produced it.

For each case the lab is put in the state that makes `tp validate` (or `tp submit`) give the hint, the
command is read out of the hint itself (placeholders such as `<owner>` filled as a person would), run,
and then the problem must be gone (a fix) or the command must show the person what is wrong (a
diagnosis). A last test reads the check rules' source for every `tp …` command a hint can name and
fails on one that no case here runs, so a new hint comes with its proof.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.repos import git

ROOT = Path(__file__).resolve().parents[1]
OPSD = "alice/opsd"


@dataclass(frozen=True)
class Case:
    """A situation, the rule it breaks, and how a person fills the hint's placeholders."""

    rule: str
    runs: str  # the command the hint names, as `_command_key` words it
    setup: Callable[[Path, Any], None]
    fill: dict[str, str] = field(default_factory=dict)
    diagnosis: str = ""  # the command only shows the problem: its output must contain this
    before: Callable[[Path], None] | None = None  # a step the hint asks for in words (delete a file)
    command: tuple[str, ...] = ("validate", "--format", "json")  # what gives the hint


def _ok(result: Any) -> None:
    assert result.code == 0, result.output


def _exp(lab: Path, name: str) -> Path:
    return lab / "experiments" / name


def _new(tp: Any, name: str, method: str) -> None:
    _ok(tp("new", name, "--method", method))


def _lock(lab: Path, name: str) -> Path:
    return _exp(lab, name) / "recipe.lock.json"


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _with_plugin(lab: Path, tp: Any, *refs: str) -> None:
    """An image-classification experiment `img` with the lab's plugins `refs` locked."""
    _new(tp, "img", "pytorch/image-classification")
    for ref in refs:
        _ok(tp("plugin", "new", ref.split("/")[1]))
        _ok(tp("plugin", "lock", "img", ref))


# ── the situations ──────────────────────────────────────────────────────────────────────────────────


def _lock_deleted(lab: Path, tp: Any) -> None:
    _new(tp, "sft-tiny", "trl/sft")
    _lock(lab, "sft-tiny").unlink()


def _lock_deleted_recipe_renamed(lab: Path, tp: Any) -> None:
    """The config's schema line names a recipe the catalog no longer has: the person names one."""
    _lock_deleted(lab, tp)
    config = _exp(lab, "sft-tiny") / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("config/trl/sft.", "config/trl/sft-old."))


def _image_lock_deleted(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _commit(lab)
    _lock(lab, "img").unlink()


def _custom_lock_deleted(lab: Path, tp: Any) -> None:
    _new(tp, "demo", "custom/custom")
    _lock(lab, "demo").unlink()


def _lock_other_api(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _edit_json(_lock(lab, "img"), lambda d: d.update(apiVersion="tuneplane/recipe/v1"))


def _lock_drifted(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _edit_json(_lock(lab, "img"), lambda d: d["recipe"].update(version="0.9.0"))


def _lock_tampered(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _edit_json(_lock(lab, "img"), lambda d: d["recipe"].update(digest="sha256:" + "0" * 64))


def _lock_starforge(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _edit_json(_lock(lab, "img"), lambda d: (d.update(apiVersion="forge/recipe-lock/v3"), d.pop("bindings")))


def _lock_unknown_recipe(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _edit_json(_lock(lab, "img"), lambda d: d["recipe"].update(name="pytorch/image-clasification"))


def _config_typo(lab: Path, tp: Any) -> None:
    _new(tp, "sft", "trl/sft")
    config = _exp(lab, "sft") / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "learnig_rate: 1.0e-5\n", encoding="utf-8")


def _plugins_lock_not_json(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD)
    (_exp(lab, "img") / "plugins.lock.json").write_text("{oops\n", encoding="utf-8")


def _delete_plugins_lock(lab: Path) -> None:
    (_exp(lab, "img") / "plugins.lock.json").unlink()


def _plugins_lock_entry_incomplete(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD)
    _edit_json(_exp(lab, "img") / "plugins.lock.json", lambda d: d["plugins"][0].pop("digest"))


def _plugins_lock_unsorted(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD, "alice/beta")
    _edit_json(_exp(lab, "img") / "plugins.lock.json", lambda d: d["plugins"].reverse())


def _plugin_edited(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD)
    module = lab / "plugins" / "opsd" / "opsd_plugin.py"
    module.write_text(module.read_text(encoding="utf-8") + "\n# tuned\n", encoding="utf-8")


def _plugin_version_bumped(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD)
    manifest = lab / "plugins" / "opsd" / "plugin.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("0.1.0", "0.2.0"), encoding="utf-8")


def _plugin_broken(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD)
    manifest = lab / "plugins" / "opsd" / "plugin.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("capability:", "capabilty:"), encoding="utf-8")


def _plugin_folder_without_manifest(lab: Path, tp: Any) -> None:
    (lab / "plugins" / "foo").mkdir(parents=True)


def _plugin_manifest_empty(lab: Path, tp: Any) -> None:
    (lab / "plugins" / "bar").mkdir(parents=True)
    (lab / "plugins" / "bar" / "plugin.yaml").write_text("\n", encoding="utf-8")


def _sweep_request_deleted(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _commit(lab)
    _ok(tp("sweep", "img", "--grid", "learning_rate=0.1,0.2", "--name", "lr", "--profile", "local"))
    next((lab / "runs" / "img").glob("*.yaml")).unlink()


def _request_of_no_experiment(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")
    _commit(lab)
    _ok(tp("submit", "img", "--profile", "local"))
    request = next((lab / "runs" / "img").glob("*.yaml"))
    moved = lab / "runs" / "imj" / request.name
    moved.parent.mkdir()
    moved.write_text(request.read_text(encoding="utf-8").replace("experiment: img", "experiment: imj"))
    request.unlink()


def _starforge_lab(lab: Path, tp: Any) -> None:
    """A StarForge lab not converted yet: its plugin manifests are StarForge's."""
    import shutil

    from support.shared import require_shared

    shutil.rmtree(lab)
    shutil.copytree(require_shared("fixtures", "starforge-lab"), lab)
    os.chdir(lab)  # the working directory was the folder just replaced
    git(lab, "init", "-q")
    _commit(lab)


def _plugin_only(lab: Path, tp: Any) -> None:
    _with_plugin(lab, tp, OPSD)


def _image_only(lab: Path, tp: Any) -> None:
    _new(tp, "img", "pytorch/image-classification")


def _commit(lab: Path) -> None:
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "work", "--allow-empty")


CASES = {
    "lock deleted": Case("lock-missing", "recipe upgrade", _lock_deleted),
    "lock deleted, nothing names the recipe": Case(
        "lock-missing", "recipe upgrade", _custom_lock_deleted, fill={"FRAMEWORK/RECIPE": "custom/custom"}
    ),
    "lock deleted, the recipe named is gone": Case(
        "lock-missing", "recipe upgrade", _lock_deleted_recipe_renamed, fill={"FRAMEWORK/RECIPE": "trl/sft"}
    ),
    "lock deleted, at submit": Case(
        "lock-missing", "recipe upgrade", _image_lock_deleted, command=("submit", "img", "--profile", "local")
    ),
    "lock of another kind": Case("lock-version", "recipe upgrade", _lock_other_api),
    "lock drifted": Case("lock-drift", "recipe upgrade", _lock_drifted),
    "lock tampered": Case("lock-tampered", "recipe upgrade", _lock_tampered),
    "StarForge lock": Case("lock-legacy", "recipe upgrade", _lock_starforge),
    "lock of an unknown recipe": Case(
        "lock-blocking", "methods", _lock_unknown_recipe, diagnosis="pytorch/image-classification"
    ),
    "config typo": Case("config-unknown", "methods", _config_typo, diagnosis="learning_rate"),
    "plugins lock not JSON": Case(
        "plugins-lock-parse",
        "plugin lock",
        _plugins_lock_not_json,
        fill={"<owner>/<name>": OPSD},
        before=_delete_plugins_lock,
    ),
    "plugins lock entry incomplete": Case(
        "plugins-lock-schema", "plugin lock", _plugins_lock_entry_incomplete, fill={"<owner>/<name>": OPSD}
    ),
    "plugins lock unsorted": Case("plugins-lock-order", "plugin lock", _plugins_lock_unsorted),
    "plugin edited after locking": Case("plugins-lock-digest", "plugin lock", _plugin_edited),
    "plugin version bumped": Case("plugins-lock-version", "plugin lock", _plugin_version_bumped),
    "plugin manifest broken": Case(
        "plugins-lock-plugin-invalid", "plugin validate", _plugin_broken, diagnosis="capabilty"
    ),
    "plugin folder without plugin.yaml": Case("plugin-missing", "plugin new", _plugin_folder_without_manifest),
    "empty plugin.yaml": Case("plugin-schema", "plugin new", _plugin_manifest_empty),
    "sweep request deleted": Case("sweep-requests", "sweep extend", _sweep_request_deleted),
    "StarForge plugin in a StarForge lab": Case(
        "plugin-legacy-schema", "migrate", _starforge_lab, command=("plugin", "validate", "plugins/opsd")
    ),
    "plugin lock of a plugin not in the lab": Case(
        "", "plugin new", _image_only, command=("plugin", "lock", "img", "alice/nope")
    ),
    "plugin lock into no experiment": Case(
        "",
        "new",
        _plugin_only,
        command=("plugin", "lock", "cls", OPSD),
        fill={"FRAMEWORK/RECIPE": "pytorch/image-classification"},
    ),
    "request of no experiment": Case("run-experiment", "ls", _request_of_no_experiment, diagnosis="img"),
}


# ── reading a hint ──────────────────────────────────────────────────────────────────────────────────

_QUOTED = re.compile(r"`(tp [^`]+)`")
_BARE = re.compile(r"(?:^|: )(tp [a-z][^;`]*)$")


def commands_in(hint: str) -> list[str]:
    """The `tp …` commands a hint names: quoted in backticks, or the bare command it ends with."""
    quoted = _QUOTED.findall(hint)
    if quoted:
        return quoted
    bare = _BARE.search(hint)
    return [bare[1].strip()] if bare else []


def _hints(result: Any, rule: str) -> list[str]:
    """The hints of the problems of `rule` in a report (JSON or text), or the hint of a refusal."""
    try:
        report = json.loads(result.out)
    except json.JSONDecodeError:
        lines = [line.strip() for line in (result.out + result.err).splitlines()]
        hints = [
            (before, line[len("hint:") :].strip())
            for before, line in zip(lines, lines[1:], strict=False)
            if line.startswith("hint:")
        ]
        mine = [hint for before, hint in hints if f"[{rule}]" in before]
        return mine or [hint for _, hint in hints]
    return [p["hint"] for p in report["problems"] if p["rule"] == rule]


def _problems(tp: Any, rule: str) -> list[dict[str, Any]]:
    report = json.loads(tp("validate", "--format", "json").out)
    return [p for p in report["problems"] if p["rule"] == rule]


@pytest.mark.parametrize("name", list(CASES))
def test_the_hint_command_fixes_what_it_names(lab: Path, tp: Any, name: str) -> None:
    case = CASES[name]
    case.setup(lab, tp)
    given = tp(*case.command)
    assert given.code != 0 or case.rule in given.out, given.output
    hints = _hints(given, case.rule)
    commands = [c for hint in hints for c in commands_in(hint)]
    assert commands, (name, hints, given.output)
    if case.before is not None:
        case.before(lab)
    assert case.runs in {_command_key(c) for c in commands}, commands
    for command in commands:
        for placeholder, value in case.fill.items():
            command = command.replace(placeholder, value)
        assert "<" not in command and "FRAMEWORK" not in command, f"a placeholder is left in {command!r}"
        ran = tp(*shlex.split(command)[1:])
        assert "Traceback" not in ran.output
        if _command_key(command) != case.runs:  # a listing the hint points to beside the fix
            assert ran.code == 0, (command, ran.output)
        elif case.diagnosis:
            assert ran.code in (0, 1) and case.diagnosis in ran.output, (command, ran.output)
        else:
            assert ran.code == 0, (command, ran.output)
    if not case.diagnosis:
        assert not _problems(tp, case.rule), (name, commands)
        if case.command[0] != "validate":  # what gave the hint no longer gives it
            _commit(lab)
            again = tp(*case.command)
            assert not set(hints) & set(_hints(again, case.rule)), again.output


# ── every command a hint can name has its case ──────────────────────────────────────────────────────

# Where the check rules name a tp command outside a fix: what the words are for instead.
NOT_A_FIX = {
    "validate": "the subject of a message (`tp validate` refuses …), or 'run it to see every problem'",
    "submit": "what writes a run request with a new id, named where a run id is used twice",
    "job metrics": "a message says where a run's metrics show",
}
# the check rules, the lab readers whose problems `tp validate` reports, and the authoring commands
SOURCES = [
    *sorted((ROOT / "tuneplane" / "check").rglob("*.py")),
    *(ROOT / "tuneplane" / "lab" / name for name in ("layout.py", "load.py", "locks.py")),
    *(ROOT / "tuneplane" / "author" / name for name in ("plugin_scaffold.py", "plugin_lock.py", "upgrade.py")),
]
_GROUPS = ("recipe", "plugin", "sweep", "job", "cluster", "ingest", "bot")  # a command of two words


def _command_key(command: str) -> str:
    """`recipe upgrade` of `tp recipe upgrade img`, `methods` of `tp methods trl/sft`."""
    words = command.split()[1:]
    return " ".join(words[:2]) if words and words[0] in _GROUPS and len(words) > 1 else words[0]


def _strings(path: Path) -> list[str]:
    """The string literals of a module, docstrings left out, each f-string as its literal parts."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
    return out


def test_every_command_a_hint_names_is_run_by_a_case() -> None:
    from tuneplane.cli.app import COMMANDS

    named = {
        _command_key(m)
        for path in SOURCES
        for text in _strings(path)
        for m in re.findall(r"\btp [a-z][a-z-]*(?: [a-z][a-z-]*)?", text)
        if m.split()[1] in COMMANDS  # "what tp checks" is words, not a command
    }
    run_by_cases = {case.runs for case in CASES.values()}
    missing = named - run_by_cases - set(NOT_A_FIX)
    assert not missing, f"hints name {sorted(missing)}: add a case that runs each"
