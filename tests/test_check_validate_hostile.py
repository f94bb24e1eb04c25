"""Bad input of every kind: `tp validate` names the file, the line and the rule, and never crashes.

Each case starts from the same lab (a custom, a PyTorch and a TRL experiment made by `tp new`), breaks
one thing, and expects one Problem at an exact place. Lines are given as a number, or as a piece of
text whose first line in the broken file is the expected one (lock files are rewritten by the cases).
A few cases also run through the real `tp validate` process: exit 1, no traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.labs import new_lab

from tuneplane.author.scaffold import new_experiment
from tuneplane.check.admission import EXTERNAL_NEEDS_URL
from tuneplane.lab.catalog import load_catalog, packaged_catalog_root
from tuneplane.lab.load import load_lab

RUN_ID = "20260101-120000-abcdef"
ALLOW = {"TUNEPLANE_ALLOWED_IMAGE_REGISTRIES": "registry.example.com"}
GOOD_IMAGE = "registry.example.com/team/trainer:1.0"
URL = "https://wandb.example.org/team/proj"
EXPERIMENTS = {"byo": "custom/custom", "img": "pytorch/image-classification", "sft": "trl/sft"}


# ── the lab every case starts from ──────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def base_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once through the library with the packaged catalog, whatever the environment says."""
    root = tmp_path_factory.mktemp("adversarial") / "lab"
    new_lab(root, "adversarial", use_git=False)
    catalog = load_catalog(packaged_catalog_root())
    lab = load_lab(root)
    for name, method in EXPERIMENTS.items():
        new_experiment(lab, name, method, None, catalog=catalog)
    return root


# ── files a case writes ─────────────────────────────────────────────────────────────────────────────


def run_path(exp: str) -> str:
    return f"runs/{exp}/{RUN_ID}.yaml"


def byo_run(image: str = GOOD_IMAGE, tail: str = f"observability_url: {URL}\n") -> str:
    """Line 6 is the image, line 7 the observability URL."""
    return (
        f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: byo\nrun_id: {RUN_ID}\n"
        f"profile: h200:8\nimage: {json.dumps(image)}\n{tail}"
    )


def img_run(profile: str = "h200:8", body: str = "") -> str:
    """Line 5 is the profile; `body` starts on line 6."""
    return (
        f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: img\nrun_id: {RUN_ID}\nprofile: {profile}\n{body}"
    )


def sft_run(body: str) -> str:
    return f"apiVersion: tuneplane/run/v1\nkind: RunRequest\nexperiment: sft\nrun_id: {RUN_ID}\nprofile: h200:8\n{body}"


def alias_bomb(levels: int = 9) -> str:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


LOCK = "experiments/{}/recipe.lock.json"


def edit_lock(exp: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """A setup step: load the lock `tp new` wrote, change it, write it back as tp would."""

    def setup(root: Path) -> None:
        path = root / LOCK.format(exp)
        data = json.loads(path.read_text(encoding="utf-8"))
        change(data)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    return setup


def set_in(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return change


def drop(*keys: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return change


def replace_with_symlink(rel: str, target_outside: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        outside = root.parent / target_outside
        outside.write_text("#!/bin/sh\necho pwned\n", encoding="utf-8")
        (root / rel).unlink()
        (root / rel).symlink_to(outside)

    return setup


def rename(src: str, dst: str) -> Callable[[Path], None]:
    return lambda root: os.rename(root / src, root / dst)


def remove(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


def make_dir(rel: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / rel).mkdir(parents=True)
        (root / rel / "train.sh").write_text("echo hi\n", encoding="utf-8")

    return setup


def dir_instead_of(rel: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / rel).unlink()
        (root / rel).mkdir()

    return setup


# ── the cases ───────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Case:
    id: str
    file: str
    line: int | str  # a number, or text whose first line in `file` is the expected line
    rule: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    says: str = ""  # expected in the message or the hint
    severity: str = "error"


CFG = "experiments/img/config.yaml"
CASES = [
    # config.yaml: the file itself
    Case("config-malformed-yaml", CFG, 3, "yaml-syntax", {CFG: "epochs: 3\nbatch_size: [1, 2\nseed: 1\n"}),
    Case("config-duplicate-key", CFG, 3, "duplicate-key", {CFG: "epochs: 3\nseed: 1\nepochs: 5\n"}, says="line 1"),
    Case("config-alias-bomb", CFG, 1, "yaml-aliases", {CFG: alias_bomb()}, says="alias"),
    Case("config-10mb", CFG, 1, "too-large", {CFG: b"# padding\n" * (1024 * 1024)}),
    Case("config-binary", CFG, 1, "binary", {CFG: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"}),
    Case("config-latin1", CFG, 2, "encoding", {CFG: b"epochs: 3\narch: caf\xe9net\n"}, says="0xe9"),
    Case("config-tabs", CFG, 2, "yaml-syntax", {CFG: "epochs: 3\n\tseed: 1\n"}, says="tab"),
    Case("config-root-is-a-list", CFG, 1, "config-root", {CFG: "- epochs\n- 3\n"}),
    Case("config-root-is-a-scalar", CFG, 1, "config-root", {CFG: "just text\n"}),
    Case(
        "config-python-tag", CFG, 2, "yaml-syntax", {CFG: "epochs: 3\nseed: !!python/object/apply:os.system ['id']\n"}
    ),
    # a custom experiment's config.yaml is the user's own and never parsed: see test_check_rules_config.py
    # config.yaml: values against the recipe's params
    Case(
        "param-typo",
        CFG,
        2,
        "config-unknown",
        {CFG: "epochs: 3\nlearning_rte: 0.1\n"},
        says="learning_rate",  # the config is closed: its train.py would not apply the key
    ),
    Case("param-bool-for-int", CFG, 2, "config-type", {CFG: "seed: 1\nepochs: true\n"}, says="boolean"),
    Case("param-text-for-int", CFG, 1, "config-type", {CFG: 'epochs: "3"\n'}),
    Case("param-below-min", CFG, 3, "config-range", {CFG: "epochs: 3\nseed: 1\nbatch_size: 0\n"}, says="minimum"),
    Case("param-exclusive-min", CFG, 1, "config-range", {CFG: "learning_rate: 0\n"}, says="exclusive"),
    Case("param-above-max", CFG, 2, "config-range", {CFG: "epochs: 3\nlabel_smoothing: 0.9\n"}, says="maximum"),
    Case("param-not-in-choices", CFG, 1, "config-choice", {CFG: "optimizer: adam\n"}, says="adamw"),
    Case("param-exponent-as-text", CFG, 2, "config-type", {CFG: "epochs: 3\nlearning_rate: 1e-6\n"}, says="1.0e-6"),
    Case("param-nested-path-typo", CFG, 1, "config-type", {CFG: "weight_decay: [0.1]\n"}, says="list"),
    # recipe.lock.json
    Case(
        "lock-missing",
        "experiments/img/recipe.lock.json",
        0,
        "lock-missing",
        setup=remove("experiments/img/recipe.lock.json"),
        says="tp recipe upgrade img",
    ),
    Case(
        "lock-not-json",
        LOCK.format("img"),
        3,
        "json-syntax",
        {LOCK.format("img"): '{\n  "apiVersion": "tuneplane/recipe-lock/v1",\n}\n'},
    ),
    Case("lock-binary", LOCK.format("img"), 1, "binary", {LOCK.format("img"): b"\x00\x01\x02\x03"}),
    Case("lock-root-is-a-list", LOCK.format("img"), 1, "lock-version", {LOCK.format("img"): "[]\n"}),
    Case(
        "lock-duplicate-top-key",
        LOCK.format("img"),
        3,
        "duplicate-key",
        {LOCK.format("img"): '{\n  "apiVersion": "tuneplane/recipe-lock/v1",\n  "apiVersion": "x"\n}\n'},
    ),
    Case(
        "lock-duplicate-nested-key",
        LOCK.format("img"),
        5,
        "duplicate-key",
        {
            LOCK.format("img"): '{\n  "recipe": {"version": "1.0.0"},\n  "framework": {\n'
            '    "version": "2.14.0",\n    "version": "2.13.0"\n  }\n}\n'
        },
    ),
    Case(
        "lock-old-api",
        LOCK.format("img"),
        '"apiVersion"',
        "lock-version",
        setup=edit_lock("img", set_in("apiVersion", value="forge/recipe-lock/v1")),
        says="tp recipe upgrade",
    ),
    Case(
        "lock-newer-api",
        LOCK.format("img"),
        '"apiVersion"',
        "lock-version",
        setup=edit_lock("img", set_in("apiVersion", value="tuneplane/recipe-lock/v2")),
        says="upgrade tp the way tool.requirement",
    ),
    Case(
        "lock-missing-section",
        LOCK.format("img"),
        1,
        "lock-schema",
        setup=edit_lock("img", drop("framework")),
        says="framework",
    ),
    Case(
        "lock-missing-field",
        LOCK.format("img"),
        '"recipe": {',
        "lock-schema",
        setup=edit_lock("img", drop("recipe", "template_digest")),
        says="template_digest",
    ),
    Case(
        "lock-unknown-field",
        LOCK.format("img"),
        '"surprise"',
        "lock-schema",
        setup=edit_lock("img", set_in("surprise", value=1)),
        says="surprise",
    ),
    Case(
        "lock-tampered-digest",
        LOCK.format("img"),
        '"digest": "sha256:0000',
        "lock-tampered",
        setup=edit_lock("img", set_in("recipe", "digest", value="sha256:" + "0" * 64)),
        says="tp recipe upgrade img",
    ),
    Case(
        "lock-malformed-digest",
        LOCK.format("img"),
        '"manifest_digest": "sha256:xyz"',
        "lock-schema",
        setup=edit_lock("img", set_in("recipe", "manifest_digest", value="sha256:xyz")),
    ),
    Case(
        "lock-unknown-recipe",
        LOCK.format("img"),
        '"name": "pytorch/image-clasification"',
        "lock-blocking",
        setup=edit_lock("img", set_in("recipe", "name", value="pytorch/image-clasification")),
        says="did you mean 'pytorch/image-classification'",
    ),
    # the custom entrypoint
    Case(
        "entrypoint-dotdot",
        LOCK.format("byo"),
        '"value": "../../etc/passwd"',
        "entrypoint",
        setup=edit_lock("byo", set_in("bindings", "entrypoint", "value", value="../../etc/passwd")),
        says="custom entrypoint is missing or escapes the experiment directory",
    ),
    Case(
        "entrypoint-absolute",
        LOCK.format("byo"),
        '"value": "/etc/passwd"',
        "entrypoint",
        setup=edit_lock("byo", set_in("bindings", "entrypoint", "value", value="/etc/passwd")),
        says="custom entrypoint is missing or escapes the experiment directory",
    ),
    Case(
        "entrypoint-symlink-out",
        "experiments/byo/train.sh",
        1,
        "entrypoint",
        setup=replace_with_symlink("experiments/byo/train.sh", "outside.sh"),
        says="symlink",
    ),
    Case(
        "entrypoint-renamed",
        LOCK.format("byo"),
        '"value": "train.sh"',
        "entrypoint",
        setup=rename("experiments/byo/train.sh", "experiments/byo/run.sh"),
        says="train.sh",
    ),
    Case(
        "entrypoint-is-a-directory",
        LOCK.format("byo"),
        '"value": "train.sh"',
        "entrypoint",
        setup=dir_instead_of("experiments/byo/train.sh"),
    ),
    Case(
        "entrypoint-pytorch-deleted",
        LOCK.format("img"),
        '"value": "train.py"',
        "entrypoint",
        setup=remove("experiments/img/train.py"),
        says="pytorch entrypoint is missing",
    ),
    # experiment names (directories: line 0 is the whole thing)
    Case("name-with-space", "experiments/a b", 0, "experiment-name", setup=make_dir("experiments/a b")),
    Case("name-non-ascii", "experiments/données", 0, "experiment-name", setup=make_dir("experiments/données")),
    Case("name-leading-dash", "experiments/-x", 0, "experiment-name", setup=make_dir("experiments/-x")),
    # run requests: images against an allowlist of registry.example.com
    *[
        Case(f"image-{cid}", run_path("byo"), 6, "run-image", {run_path("byo"): byo_run(image)}, env=ALLOW, says=says)
        for cid, image, says in [
            ("host-suffix", "registry.example.com.evil.io/x:1", "registry.example.com.evil.io"),
            ("host-in-path", "evil.io/registry.example.com/x:1", "'evil.io'"),
            ("userinfo-trick", "registry.example.com@evil.io/x", "not a valid image reference"),
            ("upper-case-host", "REGISTRY.EXAMPLE.COM/x:1", "lower case"),
            ("with-port", "registry.example.com:5000/x:1", "registry.example.com:5000"),
            ("malformed-digest", "registry.example.com/x@sha256:abc", "digest"),
            ("docker-hub", "python:3.12", "docker.io"),
            ("upper-case-digest", "registry.example.com/x@sha256:" + "A" * 64, "digest"),
        ]
    ],
    Case(
        "image-allowlist-empty",
        run_path("byo"),
        6,
        "run-image",
        {run_path("byo"): byo_run()},
        env={"TUNEPLANE_ALLOWED_IMAGE_REGISTRIES": ""},
        says="administrator",
    ),
    Case(
        "image-missing-for-custom",
        run_path("byo"),
        1,
        "run-image",
        {run_path("byo"): byo_run().replace(f'image: "{GOOD_IMAGE}"\n', "")},
        says="--image",
    ),
    # run requests: profiles and hyperparameters
    Case(
        "profile-not-whole-nodes", run_path("img"), 5, "run-profile", {run_path("img"): img_run("h200:12")}, says="16"
    ),
    Case(
        "profile-too-many-nodes",
        run_path("img"),
        5,
        "run-profile",
        {run_path("img"): img_run("h200:64")},
        says="at most 4",
    ),
    Case(
        "profile-unknown",
        run_path("img"),
        5,
        "run-profile",
        {run_path("img"): img_run("h20:8")},
        says="did you mean 'h200'",
    ),
    Case("profile-bad-syntax", run_path("img"), 5, "run-schema", {run_path("img"): img_run("h200:eight")}),
    Case(
        "set-unknown-key",
        run_path("img"),
        7,
        "run-set",
        {run_path("img"): img_run(body="set:\n  learning_rte: 0.1\n")},
        says="did you mean 'learning_rate'",
    ),
    Case("set-bool-for-int", run_path("img"), 7, "run-set", {run_path("img"): img_run(body="set:\n  epochs: true\n")}),
    Case(
        "set-out-of-range",
        run_path("img"),
        8,
        "run-set",
        {run_path("img"): img_run(body="set:\n  epochs: 2\n  batch_size: -1\n")},
        says="minimum",
    ),
    # run requests: what each adapter needs
    Case(
        "trl-missing-all-inputs",
        run_path("sft"),
        1,
        "run-inputs",
        {run_path("sft"): sft_run("")},
        says="The trl recipe requires explicit: --model --train-data --validation-data",
    ),
    Case(
        "trl-missing-some-inputs",
        run_path("sft"),
        6,
        "run-inputs",
        {run_path("sft"): sft_run("inputs:\n  train_data: data/train.jsonl\n")},
        says="The trl recipe requires explicit: --model --validation-data",
    ),
    Case(
        "custom-without-observability-url",
        run_path("byo"),
        1,
        "run-observability",
        {run_path("byo"): byo_run(tail="")},
        env=ALLOW,
        says=EXTERNAL_NEEDS_URL,
    ),
    Case(
        "platform-with-observability-url",
        run_path("img"),
        6,
        "run-observability",
        {run_path("img"): img_run(body=f"observability_url: {URL}\n")},
        says="platform",
    ),
    Case(
        "export-on-custom",
        run_path("byo"),
        8,
        "run-operation",
        {run_path("byo"): byo_run(tail=f"observability_url: {URL}\noperation: export\n")},
        env=ALLOW,
        says="custom adapter refuses export",
    ),
    # run requests: the file itself
    Case("run-malformed-yaml", run_path("img"), 5, "yaml-syntax", {run_path("img"): img_run("h200: 8")}),
    Case("run-duplicate-key", run_path("img"), 6, "duplicate-key", {run_path("img"): img_run(body="profile: local\n")}),
    Case("run-root-is-a-list", run_path("img"), 1, "run-schema", {run_path("img"): "- img\n"}),
    Case(
        "run-unknown-key",
        run_path("img"),
        6,
        "run-schema",
        {run_path("img"): img_run(body="imagee: x\n")},
        says="imagee",
    ),
    Case(
        "run-id-not-the-file-name",
        f"runs/img/{RUN_ID[:-1]}0.yaml",
        4,
        "run-schema",
        {f"runs/img/{RUN_ID[:-1]}0.yaml": img_run()},
        says="rename",
    ),
    Case(
        "run-for-a-missing-experiment",
        run_path("nope"),
        3,
        "run-experiment",
        {run_path("nope"): img_run().replace("experiment: img", "experiment: nope")},
    ),
    # the lab file
    Case(
        "lab-unknown-key",
        "tuneplane.yaml",
        3,
        "lab-schema",
        {"tuneplane.yaml": "apiVersion: tuneplane/project/v1\nname: lab\nprofilez: {}\n"},
        says="profilez",
    ),
    Case(
        "lab-newer-api",
        "tuneplane.yaml",
        1,
        "lab-version",
        {"tuneplane.yaml": "apiVersion: tuneplane/project/v2\nname: lab\n"},
        says="upgrade tp the way tool.requirement",
    ),
    Case(
        "lab-bad-profile-name",
        "tuneplane.yaml",
        4,
        "lab-schema",
        {"tuneplane.yaml": "apiVersion: tuneplane/project/v1\nname: lab\nprofiles:\n  bad name: {}\n"},
    ),
    Case(
        "lab-negative-gpus",
        "tuneplane.yaml",
        5,
        "lab-schema",
        {"tuneplane.yaml": "apiVersion: tuneplane/project/v1\nname: lab\nprofiles:\n  p:\n    gpus_per_node: -1\n"},
    ),
]


def expected_line(root: Path, case: Case) -> int:
    if isinstance(case.line, int):
        return case.line
    lines = (root / case.file).read_text(encoding="utf-8").splitlines()
    found = [n for n, text in enumerate(lines, 1) if case.line in text]
    assert found, f"{case.line!r} is not in {case.file}"
    return found[0]


def prepare(base: Path, tmp_path: Path, case: Case) -> Path:
    root = tmp_path / "lab"
    shutil.copytree(base, root, symlinks=True)
    for rel, content in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    if case.setup is not None:
        case.setup(root)
    return root


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_problem_names_file_line_and_rule(base_lab: Path, tmp_path: Path, tp: Any, case: Case) -> None:
    root = prepare(base_lab, tmp_path, case)
    result = tp("validate", "--format", "json", cwd=root, env=case.env)
    assert "Traceback" not in result.output
    report = json.loads(result.out)
    line = expected_line(root, case)
    found = [p for p in report["problems"] if (p["file"], p["rule"]) == (case.file, case.rule)]
    assert found, f"no {case.rule} on {case.file}; got:\n{json.dumps(report['problems'], indent=1)}"
    at_line = [p for p in found if p["line"] == line]
    assert at_line, f"{case.rule} on {case.file} at lines {[p['line'] for p in found]}, expected {line}"
    problem = at_line[0]
    assert problem["severity"] == case.severity
    assert case.says in problem["message"] + "\n" + problem["hint"]
    if case.severity == "error":
        assert report["errors"] >= 1


SUBPROCESS_CASES = [
    "config-malformed-yaml",
    "config-alias-bomb",
    "lock-tampered-digest",
    "image-host-suffix",
    "entrypoint-symlink-out",
    "config-latin1",
]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in SUBPROCESS_CASES], ids=SUBPROCESS_CASES)
def test_real_tp_validate_exits_1_without_traceback(
    base_lab: Path, tmp_path: Path, tp_subprocess: Any, case: Case
) -> None:
    root = prepare(base_lab, tmp_path, case)
    result = tp_subprocess("validate", cwd=root, env=case.env)
    assert "Traceback" not in result.output
    assert f"{case.file}:{expected_line(root, case)}:" in result.out
    assert f"[{case.rule}]" in result.out
    assert result.code == 1, result.output


def test_every_problem_at_once(base_lab: Path, tmp_path: Path, tp: Any) -> None:
    """Three broken files in three places: all three are reported in one run."""
    case = Case(
        "combined",
        CFG,
        1,
        "x",
        {
            CFG: "epochs: true\n",
            "experiments/sft/config.yaml": "a: [\n",
            run_path("img"): img_run("h200:12"),
        },
    )
    root = prepare(base_lab, tmp_path, case)
    report = json.loads(tp("validate", "--format", "json", cwd=root).out)
    places = {(p["file"], p["rule"]) for p in report["problems"]}
    assert {
        (CFG, "config-type"),
        ("experiments/sft/config.yaml", "yaml-syntax"),
        (run_path("img"), "run-profile"),
    } <= places


# ── `tp new` refusals ───────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "name",
    ["..", ".", "a b", "données", "-x", "_x", "a/b", "x\ny", ""],
    ids=["dotdot", "dot", "space", "non-ascii", "leading-dash", "leading-underscore", "slash", "newline", "empty"],
)
def test_tp_new_refuses_bad_names(base_lab: Path, tmp_path: Path, tp: Any, name: str) -> None:
    root = tmp_path / "lab"
    shutil.copytree(base_lab, root, symlinks=True)
    before = sorted(p.name for p in (root / "experiments").iterdir())
    result = tp("new", "--method", "custom/custom", "--", name, cwd=root)
    assert result.code == 2, result.output
    assert "not allowed" in result.err and "Traceback" not in result.output
    assert sorted(p.name for p in (root / "experiments").iterdir()) == before
    assert not (root.parent / "b").exists() and not (root / "a").exists()


@pytest.mark.parametrize(
    "method,suggestion",
    [
        ("custom/custon", "custom/custom"),
        ("pytorch/image-clasification", "pytorch/image-classification"),
        ("trl/sfft", "trl/sft"),
    ],
)
def test_tp_new_unknown_method_suggests_the_closest(
    base_lab: Path, tmp_path: Path, tp: Any, method: str, suggestion: str
) -> None:
    root = tmp_path / "lab"
    shutil.copytree(base_lab, root, symlinks=True)
    result = tp("new", "fresh", "--method", method, cwd=root)
    assert result.code == 2, result.output
    assert f"unknown method {method!r}" in result.err
    assert f"did you mean {suggestion!r}" in result.err
    assert not (root / "experiments" / "fresh").exists()
