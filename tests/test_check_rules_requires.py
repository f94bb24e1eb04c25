"""A recipe's own cross-field rules (`rules:` in recipe.yaml) on the run's effective config.

OpenRLHF's PPO dies at start without a reward (neither `reward.model_name_or_path` nor
`reward.remote_url`), and its Ray trainer asserts that validation data comes with a remote reward or an
agent. The recipes declare these as rules; one evaluator (tuneplane.check.rules.requires) checks them on
config.yaml + the parameters' defaults + `--set` + the bound inputs, for `tp validate` (the experiment
and its run requests), `tp render` and `tp submit`, with the same words. Whether each rule fires exactly
when OpenRLHF's own check fails is tests/test_catalog_framework_parsers.py's job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.repos import git

from tuneplane.check.rules.requires import broken_rules, effective_config, is_set
from tuneplane.lab.catalog import load_catalog
from tuneplane.models.recipe import Recipe, RecipeRule

INPUTS = ("--model", "Qwen/Qwen2.5-0.5B-Instruct", "--train-data", "data/train.jsonl")
RENDER = ("--profile", "local", "--image", "registry.example/fw:1", *INPUTS)
RL = ["openrlhf/ppo", "openrlhf/grpo", "openrlhf/reinforce-baseline"]
RM = "OpenRLHF/Llama-3-8b-rm-700k"


def _recipe(method: str) -> Recipe:
    return load_catalog().recipe(method)


def _problems(result: Any) -> list[dict[str, Any]]:
    assert "Traceback" not in result.output, result.output
    return [p for p in json.loads(result.out)["problems"] if p["rule"] == "config-rule"]


def _edit(lab: Path, old: str, new: str, exp: str = "exp") -> int:
    """Replace `old` (once) in the experiment's config.yaml, commit, and give the line it is on."""
    path = lab / "experiments" / exp / "config.yaml"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    text = text.replace(old, new, 1)
    path.write_text(text, encoding="utf-8")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "edit")
    return text[: text.index(new)].count("\n") + 1


def _new(lab: Path, tp: Any, method: str) -> None:
    assert tp("new", "exp", "--method", method, cwd=lab).code == 0
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "exp")


# ── the model ───────────────────────────────────────────────────────────────────────────────────────


def test_a_rule_is_strict() -> None:
    ok = RecipeRule.model_validate({"id": "reward-source", "require_any": ["reward.remote_url"], "message": "m"})
    assert ok.when == "" and ok.severity == "error"
    with_condition = RecipeRule.model_validate(
        {"id": "x", "when": {"key": "algo.estimator", "in": ["gae"]}, "require_any": ["a"], "message": "m"}
    )
    assert not isinstance(with_condition.when, str) and with_condition.when.in_ == ["gae"]
    for bad in (
        {"id": "x", "require_any": [], "message": "m"},  # nothing to require
        {"id": "Bad Id", "require_any": ["a"], "message": "m"},  # not an id
        {"id": "x", "require_any": ["a"], "message": ""},  # says nothing
        {"id": "x", "require_any": ["a"], "message": "m", "requires": ["b"]},  # unknown key
        {"id": "x", "when": {"key": "a"}, "require_any": ["a"], "message": "m"},
    ):  # no values
        with pytest.raises(ValidationError):
            RecipeRule.model_validate(bad)
    data = _recipe("openrlhf/ppo").model_dump(by_alias=True, exclude_defaults=True)
    data["rules"] = data["rules"] + data["rules"][:1]
    with pytest.raises(ValidationError, match="rule id.*used twice: reward-source"):
        Recipe.model_validate(data)


# ── the evaluator ───────────────────────────────────────────────────────────────────────────────────


def test_set_means_what_the_command_line_gets() -> None:
    assert [is_set(v) for v in (None, "", [], {}, False)] == [False] * 5
    assert [is_set(v) for v in ("x", 0, 0.0, True, ["a"])] == [True] * 5


def test_effective_config_lays_defaults_sets_and_inputs_as_the_job_does() -> None:
    ppo = _recipe("openrlhf/ppo")
    config = {"rollout": {"n_samples_per_prompt": 2}, "eval": {"dataset": ""}}
    merged = effective_config(
        ppo,
        config,
        {"temperature": 0.7, "reward.remote_url": "http://127.0.0.1:5000"},
        {"validation_data": "data/val.jsonl", "model": ""},
    )
    assert merged["rollout"]["n_samples_per_prompt"] == 2  # the file's value
    assert merged["rollout"]["batch_size"] == 128  # a parameter's default
    assert merged["rollout"]["temperature"] == 0.7  # --set by parameter name
    assert merged["reward"]["remote_url"] == "http://127.0.0.1:5000"  # --set by path
    assert merged["eval"]["dataset"] == "data/val.jsonl"  # an input at its binding
    assert "model_name_or_path" not in merged["actor"]  # an empty input: not laid
    assert config == {"rollout": {"n_samples_per_prompt": 2}, "eval": {"dataset": ""}}  # not changed


@pytest.mark.parametrize("method", RL)
def test_the_rl_rules_fire_on_what_breaks_them(method: str) -> None:
    r = _recipe(method)

    def ids(config: dict[str, Any], inputs: dict[str, str] | None = None, **sets: Any) -> list[str]:
        return [b.rule.id for b in broken_rules(r, effective_config(r, config, sets, inputs), inputs, config)]

    assert ids({}) == ["reward-source"]
    assert ids({"reward": {"model_name_or_path": ""}}) == ["reward-source"]
    assert ids({"reward": {"model_name_or_path": RM}}) == []
    assert ids({"train": {"agent_func_path": "agent.py"}}) == []
    assert ids({"reward": {"model_name_or_path": RM}}, {"validation_data": "v"}) == ["eval-needs-remote-reward"]
    assert ids({"reward": {"model_name_or_path": RM}, "eval": {"dataset": "v"}}) == ["eval-needs-remote-reward"]
    assert ids({"reward": {"remote_url": "http://127.0.0.1:5000"}}, {"validation_data": "v"}) == []
    assert ids({"reward": {"model_name_or_path": RM}, "train": {"partial_rollout_enable": True}}) == [
        "partial-rollout-needs-async"
    ]
    assert (
        ids({"reward": {"model_name_or_path": RM}, "train": {"partial_rollout_enable": True, "async_enable": True}})
        == []
    )
    assert ids({"reward": {"model_name_or_path": RM}, "train": {"partial_rollout_enable": False}}) == []
    assert ids({"reward": {"model_name_or_path": RM}, "algo": {"dynamic_filtering_enable": True}}) == [
        "dynamic-filtering-needs-remote-reward"
    ]


def test_a_condition_on_a_value_reads_the_parameter_as_set() -> None:
    """`when: {key, in}` sees the default, the file and `--set` (by name or path) in that order."""
    ppo = _recipe("openrlhf/ppo")
    rule = RecipeRule.model_validate(
        {
            "id": "gae-needs-critic",
            "when": {"key": "algo.advantage.estimator", "in": ["gae"]},
            "require_any": ["critic.model_name_or_path"],
            "message": "m",
        }
    )
    r = ppo.model_copy(update={"rules": [rule]})

    def fires(config: dict[str, Any], **sets: Any) -> bool:
        return bool(broken_rules(r, effective_config(r, config, sets)))

    assert fires({})  # the default, gae
    assert not fires({"algo": {"advantage": {"estimator": "group_norm"}}})
    assert fires({"algo": {"advantage": {"estimator": "group_norm"}}}, advantage_estimator="gae")
    assert not fires({}, **{"algo.advantage.estimator": "rloo"})
    assert not fires({"critic": {"model_name_or_path": "c"}})


def test_recipes_without_rules_are_untouched() -> None:
    for method in ("trl/sft", "custom/custom", "openrlhf/dpo"):
        r = _recipe(method)
        assert broken_rules(r, effective_config(r, {})) == []


# ── tp validate, tp render, tp submit ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize("method", RL)
def test_validate_names_the_missing_reward_at_its_key(lab: Path, tp: Any, method: str) -> None:
    _new(lab, tp, method)
    text = (lab / "experiments/exp/config.yaml").read_text(encoding="utf-8")
    line = text.splitlines().index('  model_name_or_path: ""', text.splitlines().index("reward:")) + 1
    result = tp("validate", "exp", "--format", "json", cwd=lab)
    assert result.code == 1
    [problem] = _problems(result)
    assert (problem["file"], problem["line"], problem["severity"]) == ("experiments/exp/config.yaml", line, "error")
    assert f"{method} rule 'reward-source'" in problem["message"] and "reward" in problem["message"]
    for key in ("reward.model_name_or_path", "reward.remote_url", "train.agent_func_path"):
        assert key in problem["hint"]
    human = tp("validate", "exp", cwd=lab)
    assert f"experiments/exp/config.yaml:{line}:3: error [config-rule] {method} rule 'reward-source'" in human.out
    # render and submit refuse with the same words, and write nothing
    for command in ("render", "submit"):
        refused = tp(command, "exp", *RENDER, cwd=lab)
        assert refused.code == 2 and "Traceback" not in refused.output, refused.output
        assert f"experiments/exp/config.yaml:{line}:3: {problem['message']}" in refused.err
        assert "reward.remote_url" in refused.err
    assert not (lab / "runs").exists() or not list((lab / "runs").rglob("*.yaml"))
    _edit(lab, 'reward:\n  model_name_or_path: ""', f"reward:\n  model_name_or_path: {RM}")
    assert _problems(tp("validate", "exp", "--format", "json", cwd=lab)) == []
    assert tp("render", "exp", *RENDER, cwd=lab).code == 0


@pytest.mark.parametrize("method", RL)
def test_validation_data_needs_a_remote_reward_on_submit(lab: Path, tp: Any, method: str) -> None:
    _new(lab, tp, method)
    _edit(lab, 'reward:\n  model_name_or_path: ""', f"reward:\n  model_name_or_path: {RM}")
    line = (lab / "experiments/exp/config.yaml").read_text(encoding="utf-8").splitlines().index(
        '  dataset: ""'
    ) + 1  # eval.dataset, where --validation-data lands
    for command in ("render", "submit"):
        refused = tp(command, "exp", *RENDER, "--validation-data", "data/val.jsonl", cwd=lab)
        assert refused.code == 2, refused.output
        assert f"experiments/exp/config.yaml:{line}:3: {method} rule 'eval-needs-remote-reward'" in refused.err
        assert "--eval_dataset requires" in refused.err and "reward.remote_url" in refused.err
    assert not (lab / "runs").exists() or not list((lab / "runs").rglob("*.yaml"))
    # a remote reward makes the validation data legal; submit writes the request
    _edit(lab, f"reward:\n  model_name_or_path: {RM}", "reward:\n  remote_url: http://127.0.0.1:5000/get_reward")
    assert tp("render", "exp", *RENDER, "--validation-data", "data/val.jsonl", cwd=lab).code == 0
    submitted = tp("submit", "exp", *RENDER, "--validation-data", "data/val.jsonl", cwd=lab)
    assert submitted.code == 0, submitted.output
    assert len(list((lab / "runs" / "exp").glob("*.yaml"))) == 1


def test_validate_reports_a_run_request_that_breaks_a_rule(lab: Path, tp: Any) -> None:
    _new(lab, tp, "openrlhf/grpo")
    _edit(lab, 'reward:\n  model_name_or_path: ""', f"reward:\n  model_name_or_path: {RM}")
    runs = lab / "runs" / "exp"
    runs.mkdir(parents=True)
    (runs / "20260101-000000-abcdef.yaml").write_text(
        "experiment: exp\nrun_id: 20260101-000000-abcdef\nprofile: local\nimage: registry.example/fw:1\n"
        "inputs:\n  model: m\n  train_data: t\n  validation_data: v\n",
        encoding="utf-8",
    )
    result = tp("validate", "--format", "json", cwd=lab)
    [problem] = _problems(result)
    assert problem["file"] == "runs/exp/20260101-000000-abcdef.yaml" and problem["line"] == 5
    assert "openrlhf/grpo rule 'eval-needs-remote-reward'" in problem["message"]
    assert result.code == 1


def test_sft_multiturn_needs_the_chat_template(lab: Path, tp: Any) -> None:
    _new(lab, tp, "openrlhf/sft")
    assert _problems(tp("validate", "exp", "--format", "json", cwd=lab)) == []
    line = _edit(lab, "  apply_chat_template: true\n", "  multiturn: true\n  apply_chat_template: false\n")
    [problem] = _problems(tp("validate", "exp", "--format", "json", cwd=lab))
    assert problem["line"] == line and "multiturn-needs-chat-template" in problem["message"]
    assert "data.apply_chat_template" in problem["hint"]
    refused = tp("submit", "exp", *RENDER, cwd=lab)
    assert refused.code == 2 and "multiturn-needs-chat-template" in refused.err
