"""Every flag tp renders for an OpenRLHF or ms-swift recipe parses with that framework's own parser.

Each recipe is scaffolded with `tp new` (every runtime version it offers), rendered with `tp render`,
and its launch plan's job-side renderer (`tuneplane.lifecycle.cli_flags`, run as the job runs it, the
framework module swapped for a script that prints its argv) gives the framework's command line. That
command line is parsed by:

- OpenRLHF: the argparse parser its CLI module builds, taken from the release's wheel, then the
  module's own checks on the parsed arguments (see support.frameworks);
- ms-swift: `HfArgumentParser` over its real argument dataclass (SftArguments for `swift sft`,
  RLHFArguments for `swift rlhf`), from ms-swift installed without its dependencies. Its Megatron
  recipes need Megatron-Core and Transformer Engine (CUDA) to import their arguments, so
  tests/test_catalog_framework_flags.py checks them against the flag list copied from the docs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_tp_in_process
from support.frameworks import openrlhf_args, openrlhf_check, openrlhf_wheel, swift_check, swift_python
from support.labs import new_lab
from support.repos import git
from support.yamlfiles import load_yaml

pytestmark = pytest.mark.slow

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
INPUTS = ("--model", "Qwen/Qwen2.5-0.5B-Instruct", "--train-data", "data/train.jsonl")
# What a template's README asks the user to fill beyond model and data: the reward model of the RL
# recipes (set in config.yaml, as the README says).
FILLED = {"reward": {"model_name_or_path": "OpenRLHF/Llama-3-8b-rm-700k"}}
ECHO = "import json, sys\nprint('ARGV=' + json.dumps(sys.argv[1:]))\n"
SWIFT_ARGUMENTS = {
    "swift.cli.sft": "SftArguments",
    "swift.cli.rlhf": "RLHFArguments",
    "swift.cli.export": "ExportArguments",
    "swift.cli.eval": "EvalArguments",
}


def recipe(method: str) -> dict[str, Any]:
    # libyaml's loader: pytest parametrizes from these files while collecting, on every worker
    return dict(
        yaml.load(
            (CATALOG / method / "recipe.yaml").read_text(encoding="utf-8"),
            Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader),
        )
    )


def cases(framework: str, *, megatron: bool = False) -> list[tuple[str, str]]:
    out = []
    for path in sorted((CATALOG / framework).glob("*/recipe.yaml")):
        method = f"{framework}/{path.parent.name}"
        r = recipe(method)
        if ("_megatron" in r["entrypoint"]["value"]) != megatron:
            continue
        out += [(method, version) for version in sorted(r["runtime"]["versions"])]
    return out


@pytest.fixture(scope="module")
def cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`
    return Path(given.mkdir("framework-parsers")) if given else tmp_path_factory.mktemp("framework-parsers")


def framework_argv(tmp: Path, method: str, version: str, operation: str = "train") -> tuple[str, list[str]]:
    """(framework module, its argv) for `method` at runtime `version`, as the job would start it."""
    lab = tmp / "lab"
    new_lab(lab, "parsers")
    made = run_tp_in_process("new", "exp", "--method", method, "--framework-version", version, cwd=lab)
    assert made.code == 0, made.output
    _fill(lab / "experiments" / "exp" / "config.yaml")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "exp")
    # OpenRLHF's Ray trainer refuses eval.dataset without a remote reward or an agent (its own check),
    # and so does tp (the recipe's rule), so its RL recipes are rendered without validation data;
    # every other recipe binds it too
    ray = recipe(method)["adapter_options"]["orchestrator"] == "ray" and method.startswith("openrlhf/")
    validation = () if ray else ("--validation-data", "data/val.jsonl")
    if ray:
        refused = run_tp_in_process(
            "render",
            "exp",
            "--profile",
            "local",
            "--image",
            "registry.example/fw:1",
            *INPUTS,
            "--validation-data",
            "data/val.jsonl",
            cwd=lab,
        )
        assert refused.code == 2 and "rule 'eval-needs-remote-reward'" in refused.err, refused.output
    rendered = run_tp_in_process(
        "render",
        "exp",
        "--profile",
        "local",
        "--image",
        "registry.example/fw:1",
        *INPUTS,
        *validation,
        "--format",
        "json",
        cwd=lab,
    )
    assert rendered.code == 0, rendered.output
    [plan] = [doc for doc in json.loads(rendered.out) if doc["kind"] == "LaunchPlan"]
    argv = list(plan["argv"])
    start = argv.index("tuneplane.lifecycle.cli_flags")
    options, module = argv[start + 1 : -2], argv[-1]
    config = options.index("--config") + 1
    options[config] = str(lab / "experiments" / "exp" / "config.yaml")  # the job's copy of it
    (tmp / "echo.py").write_text(ECHO, encoding="utf-8")
    # a later attempt of the run, which the launcher gave a checkpoint to resume from
    env = dict(os.environ, TUNEPLANE_RESUME_FROM=RESUME_FROM)
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane.lifecycle.cli_flags", *options, "--", str(tmp / "echo.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("ARGV="))
    return module, list(json.loads(line[5:]))


RESUME_FROM = "/runs/r/out/checkpoints/checkpoint-40"


def _fill(config: Path) -> None:
    text = config.read_text(encoding="utf-8")
    data = load_yaml(text) or {}
    for section, values in FILLED.items():
        for key, value in values.items():
            if isinstance(data.get(section), dict) and data[section].get(key) == "":
                line = f'  {key}: ""'
                assert text.count(line) >= 1, (config, line)
                text = text.replace(f"{section}:\n{line}", f"{section}:\n  {key}: {value}", 1)
    config.write_text(text, encoding="utf-8")


def _every_param_rendered(method: str, argv: list[str]) -> None:
    flags = {a[2:] for a in argv if a.startswith("--")}
    params = recipe(method)["params"]
    missing = [p["path"] for p in params.values() if p["path"] not in flags and p.get("default") not in (None, False)]
    assert missing == [], f"{method}: parameters not on the command line: {missing}"


@pytest.mark.parametrize(("method", "version"), cases("openrlhf"))
def test_openrlhf_flags_parse_with_its_own_parser(tmp_path: Path, cache: Path, method: str, version: str) -> None:
    module, argv = framework_argv(tmp_path, method, version)
    assert module == recipe(method)["entrypoint"]["value"]
    _every_param_rendered(method, argv)
    bound = recipe(method)["adapter_options"]["bindings"]["validation_data"]
    assert (f"--{bound}" in argv) == (recipe(method)["adapter_options"]["orchestrator"] != "ray")
    problem = openrlhf_check(openrlhf_wheel(cache, version), module, argv)
    assert problem is None, f"{method} @ openrlhf {version}: {problem}\nargv: {argv}"
    # OpenRLHF resumes by itself from the DeepSpeed checkpoints it keeps under the out dir
    args = openrlhf_args(openrlhf_wheel(cache, version), module, argv)
    assert args.ckpt.load_enable is True and args.ckpt.path.endswith("/out/checkpoints/deepspeed")


def test_openrlhf_parser_refuses_what_it_does_not_know(cache: Path) -> None:
    """The check is the real parser: an unknown flag, a bad type and a broken invariant all fail."""
    wheel = openrlhf_wheel(cache, "0.11.2")
    base = ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "d", "--reward.model_name_or_path", "rm"]
    assert "AttributeError" in str(openrlhf_check(wheel, "openrlhf.cli.train_ppo_ray", base[:4]))  # PPO needs an RM
    assert openrlhf_check(wheel, "openrlhf.cli.train_ppo_ray", base) is None
    assert "unrecognized arguments: --actor.learning_rate" in str(
        openrlhf_check(wheel, "openrlhf.cli.train_ppo_ray", [*base, "--actor.learning_rate", "1e-6"])
    )
    assert "invalid int value" in str(
        openrlhf_check(wheel, "openrlhf.cli.train_ppo_ray", [*base, "--rollout.n_samples_per_prompt", "x"])
    )
    assert "assertion" in str(
        openrlhf_check(
            wheel,
            "openrlhf.cli.train_ppo_ray",
            [*base, "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "1"],
        )
    )
    args = openrlhf_args(wheel, "openrlhf.cli.train_sft", ["--adam.lr", "2e-5", "--ds.zero_stage", "3"])
    assert (args.adam.lr, args.ds.zero_stage) == (2e-5, 3)


# Runtime versions with no release on PyPI to take the parser from; tests/test_catalog_framework_flags.py
# still checks them against the flag list copied from the docs.
UNPUBLISHED = {("ms-swift", "4.4.3"): "PyPI has no ms-swift 4.4.3 (4.4.2, then 4.5.0); only the image tag names it"}
SWIFT_CASES = [(m, v) for m, v in cases("ms-swift") if ("ms-swift", v) not in UNPUBLISHED]


# The argv of the checks below that are not a recipe's: what ms-swift's parser must refuse, and the
# merge command `tp export` runs (tuneplane.lifecycle.swift_export).
REFUSED = {
    "refused-unknown": ("SftArguments", ["--model", "m", "--learnin_rate", "1e-4"]),
    "refused-type": ("RLHFArguments", ["--rlhf_type", "dpo", "--beta", "strong"]),
    "refused-choice": ("RLHFArguments", ["--rlhf_type", "dpox"]),
    "refused-text": ("SftArguments", ["--eval_strategy", "no"]),
}
LATEST_SWIFT = sorted({v for _, v in SWIFT_CASES})[-1]


def _export_argv() -> list[str]:
    from tuneplane.lifecycle.swift_export import merge_argv

    return merge_argv(Path("/runs/a/out/checkpoints/checkpoint-10"), Path("/runs/a/out/.hf_export.tmp-1"))


@pytest.fixture(scope="module")
def swift_results(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> dict[str, dict[str, Any]]:
    """Every ms-swift recipe × version rendered, then parsed by ms-swift, one interpreter per version;
    the latest version's interpreter also parses the refused argvs and `tp export`'s merge command.
    (ms-swift imports transformers and torch, seconds of CPU an interpreter: every test using this
    fixture runs on one xdist worker, see conftest's _FIXTURE_GROUP.)"""
    from tuneplane.lifecycle.swift_export import MODULE

    by_version: dict[str, dict[str, tuple[str, list[str]]]] = {}
    for method, version in SWIFT_CASES:
        module, argv = framework_argv(tmp_path_factory.mktemp("swift"), method, version)
        by_version.setdefault(version, {})[f"{method}@{version}"] = (SWIFT_ARGUMENTS[module], argv)
    by_version[LATEST_SWIFT].update({**REFUSED, "export": (SWIFT_ARGUMENTS[MODULE], _export_argv())})
    results: dict[str, dict[str, Any]] = {}
    for version, todo in by_version.items():
        parsed = swift_check(swift_python(cache, version), todo)
        assert set(parsed) == set(todo), sorted(set(todo) ^ set(parsed))
        for case, outcome in parsed.items():
            results[case] = {**outcome, "argv": todo[case][1]}
    return results


@pytest.mark.parametrize(("method", "version"), SWIFT_CASES)
def test_ms_swift_flags_parse_with_its_own_parser(
    swift_results: dict[str, dict[str, Any]], method: str, version: str
) -> None:
    got = swift_results[f"{method}@{version}"]
    assert "error" not in got, f"{method} @ ms-swift {version}: {got.get('error')}\nargv: {got['argv']}"
    assert got["unknown"] == [], f"{method} @ ms-swift {version}: flags ms-swift does not define: {got['unknown']}"
    _every_param_rendered(method, got["argv"])
    assert "--val_dataset" in got["argv"] and "--dataset" in got["argv"] and "--model" in got["argv"]
    assert got["values"]["resume_from_checkpoint"] == RESUME_FROM  # the launcher's checkpoint, as ms-swift reads it
    r = recipe(method)
    for name, param in r["params"].items():  # each default reaches ms-swift as the value it means
        if param.get("default") is None or param["type"] not in ("int", "float", "bool"):
            continue
        value = got["values"][param["path"]]
        assert value == param["default"] and isinstance(value, bool) == (param["type"] == "bool"), (method, name)


def test_ms_swift_parser_refuses_what_it_does_not_know(swift_results: dict[str, dict[str, Any]]) -> None:
    parsed = {case[len("refused-") :]: swift_results[case] for case in REFUSED}
    assert parsed["unknown"]["unknown"] == ["--learnin_rate", "1e-4"]
    assert "invalid float value" in parsed["type"]["error"]
    assert "invalid choice" in parsed["choice"]["error"]
    assert parsed["text"]["values"]["eval_strategy"] in ("no", "IntervalStrategy.NO")


# ── tp export: the merge command of a LoRA checkpoint is the framework's own ───────────────────────


def test_swift_export_merge_flags_parse_with_ms_swift(swift_results: dict[str, dict[str, Any]]) -> None:
    from tuneplane.lifecycle.swift_export import MODULE

    assert MODULE == "swift.cli.export"
    got = swift_results["export"]
    assert got["argv"] == _export_argv()
    assert "error" not in got and got["unknown"] == [], got
    assert got["values"]["merge_lora"] is True
    assert got["values"]["output_dir"] == "/runs/a/out/.hf_export.tmp-1"
    assert "checkpoint-10" in str(got["values"]["adapters"])


@pytest.mark.parametrize("task", ["CAUSAL_LM", "SEQ_CLS"])
def test_openrlhf_export_merge_flags_parse_with_its_combiner(tmp_path: Path, cache: Path, task: str) -> None:
    from tuneplane.lifecycle.openrlhf_export import MODULE, merge_argv

    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-0.5B", "task_type": task}), encoding="utf-8"
    )
    argv = merge_argv(tmp_path, tmp_path / "merged")
    for version in sorted({v for _, v in cases("openrlhf")}):
        wheel = openrlhf_wheel(cache, version)
        assert openrlhf_check(wheel, MODULE, argv) is None
        args = openrlhf_args(wheel, MODULE, argv)
        assert (args.model_path, args.lora_path, args.is_rm) == ("Qwen/Qwen2.5-0.5B", str(tmp_path), task == "SEQ_CLS")


# ── the recipes' own rules (`rules:` in recipe.yaml) fire exactly when OpenRLHF's checks fail ──────

REMOTE = "http://127.0.0.1:5000/get_reward"
# Config fragments laid over the template, every combination: the reward source, validation data,
# partial rollouts with and without async training, dynamic filtering (which also needs more than one
# sample per prompt, a check of its own that no rule covers)
RULE_CASES = {
    "train_ppo_ray": [
        [
            {},
            {"reward": {"model_name_or_path": FILLED["reward"]["model_name_or_path"]}},
            {"reward": {"remote_url": REMOTE}},
            {"train": {"agent_func_path": "agent.py"}},
        ],
        [{}, {"eval": {"dataset": "data/val.jsonl"}}],
        [
            {},
            {"train": {"partial_rollout_enable": True}},
            {"train": {"partial_rollout_enable": True, "async_enable": True}},
        ],
        [{}, {"algo": {"dynamic_filtering_enable": True}, "rollout": {"n_samples_per_prompt": 2}}],
    ],
    "train_sft": [[{}, {"data": {"multiturn": True}}], [{}, {"data": {"apply_chat_template": False}}]],
}


def _merge(base: dict[str, Any], *fragments: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for fragment in fragments:
        for section, values in fragment.items():
            out.setdefault(section, {}).update(values)
    return out


@pytest.mark.parametrize("method", ["openrlhf/ppo", "openrlhf/grpo", "openrlhf/reinforce-baseline", "openrlhf/sft"])
def test_openrlhf_recipe_rules_fire_exactly_when_openrlhf_refuses(cache: Path, method: str) -> None:
    import itertools

    from tuneplane.check.rules.requires import broken_rules, effective_config
    from tuneplane.lab.catalog import load_catalog
    from tuneplane.lifecycle.cli_flags import build_flags

    r = load_catalog().recipe(method)
    module = r.entrypoint.value
    template = load_yaml(CATALOG / method / "template" / "config.yaml")
    inputs = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "train_data": "data/train.jsonl"}
    checked = 0
    for version in sorted(r.runtime.versions):
        wheel = openrlhf_wheel(cache, version)
        for fragments in itertools.product(*RULE_CASES[module.rsplit(".", 1)[1]]):
            effective = effective_config(r, _merge(template, *fragments), {}, inputs)
            ours = {b.rule.id for b in broken_rules(r, effective, inputs)}
            # without a critic, PPO's GAE takes it from the reward model and fails at start; the
            # other estimators start and fail at the first rollout (the rule says so)
            if effective.get("algo", {}).get("advantage", {}).get("estimator", "gae") != "gae":
                ours.discard("reward-source")
            problem = openrlhf_check(wheel, module, build_flags(effective, {}, {}, "dotted"))
            refused = problem is not None and "[Warning]" not in problem
            assert refused == bool(ours), f"{method} @ {version} {fragments}: ours {ours}, OpenRLHF: {problem}"
            checked += refused
    assert checked >= 2  # the combinations do reach OpenRLHF's refusals
