"""TrainingRun, the one home of what the TRL templates share, and the templates that call it.

The templates keep only their method's part (trainer and config class, own keys, rewards); these
tests check the shared part with TRL's real config classes and peft's real LoraConfig, that no two
templates carry the same code again, and that train.py starts from the SDK folder a cluster job gets
(a copy of the package on PYTHONPATH, no site-packages). The training itself runs for every recipe
in tests/test_catalog_trl_runs.py.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.yamlfiles import load_yaml

from tuneplane.lifecycle import trl_rewards
from tuneplane.lifecycle.trl_support import SCRIPT_KEYS, TrainingRun

ROOT = Path(__file__).resolve().parents[1]
TRL_TEMPLATES = sorted((ROOT / "catalog" / "trl").glob("*/template"))
REQUIRED = os.environ.get("CI") == "true"  # in CI a missing framework is a failure, not a skip
NO_PYC = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def _require(module: str) -> Any:
    if REQUIRED:
        return __import__(module)
    return pytest.importorskip(module, reason=f"{module} is not installed")


def _experiment(tmp_path: Path, config: str) -> Path:
    path = tmp_path / "exp" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config, encoding="utf-8")
    return path


def _run(tmp_path: Path, config: str, *extra: str, own_keys: tuple[str, ...] = ()) -> TrainingRun:
    path = _experiment(tmp_path, config)
    argv = ["--config", str(path), "--output-dir", str(tmp_path / "out"), *extra]
    return TrainingRun.from_command_line("test", own_keys=own_keys, argv=argv)


CONFIG = """\
model_name_or_path: from-config
dataset_train_path: train-from-config.jsonl
dataset_eval_path: ""
learning_rate: 1.0e-5
bf16: false
use_peft: true
lora_r: 8
judge_max_length: 64
output_dir: /somewhere/else
logging_dir: /elsewhere
"""


def test_arguments_win_over_the_config_and_overrides_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    run = _run(
        tmp_path,
        CONFIG,
        "--model",
        "m",
        "--validation-data",
        "val.jsonl",
        "--overrides-json",
        json.dumps({"learning_rate": 3e-5, "lora_r": 4, "max_steps": 2}),
        own_keys=("judge_max_length",),
    )
    assert (run.model, run.train_data, run.eval_data) == ("m", "train-from-config.jsonl", "val.jsonl")
    # what TRL gets: the file and the overrides, less the script's and the platform's keys
    assert run.settings == {
        "learning_rate": 3e-5,
        "bf16": False,
        "max_steps": 2,
        "output_dir": str((tmp_path / "out" / "checkpoints").resolve()),
    }
    assert run.script["lora_r"] == 4 and run.script["judge_max_length"] == 64
    assert set(run.script) <= {*SCRIPT_KEYS, "judge_max_length"}
    assert os.environ["TENSORBOARD_LOGGING_DIR"] == str((tmp_path / "out").resolve() / "logs")


def test_no_validation_data_turns_evaluation_off(tmp_path: Path) -> None:
    run = _run(tmp_path, CONFIG + "eval_strategy: steps\n")
    assert run.eval_data is None and run.settings["eval_strategy"] == "no"
    assert "judge_max_length" in run.settings  # not declared as the script's own: it goes to TRL


def test_the_config_beside_the_script_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _experiment(tmp_path, CONFIG)
    monkeypatch.setattr(sys, "argv", [str(path.parent / "train.py")])
    run = TrainingRun.from_command_line("test", argv=["--output-dir", str(tmp_path / "out")])
    assert run.config_path == path and run.model == "from-config"


@pytest.mark.parametrize(
    "config, argv, message",
    [
        ("learning_rate: 1.0\n", [], "a model and training data are required: pass --model and --train-data"),
        ("a: [1\n", [], "not valid YAML"),
        ("- a\n", [], "must be a mapping"),
        (CONFIG, ["--overrides-json", "{'lr': 1}"], "--overrides-json is not valid JSON: .* line 1, column 2"),
        (CONFIG, ["--overrides-json", '{"learning_rate.x": 1}'], "'learning_rate' is not a mapping"),
    ],
)
def test_bad_input_is_a_message_not_a_traceback(tmp_path: Path, config: str, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        _run(tmp_path, config, *argv)


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no such config file; pass --config"):
        TrainingRun.from_command_line("test", argv=["--config", str(tmp_path / "nope.yaml"), "--model", "m"])


def test_a_key_the_trl_config_refuses_names_the_file(tmp_path: Path) -> None:
    _require("trl")
    from trl import SFTConfig

    run = _run(tmp_path, CONFIG + "learnin_rate_typo_zz: 1\n", own_keys=("judge_max_length",))
    with pytest.raises(SystemExit, match=r"config\.yaml: SFTConfig refuses these settings: .*learnin_rate_typo_zz"):
        run.trl_config(SFTConfig)
    run.settings.pop("learnin_rate_typo_zz")
    built = run.trl_config(SFTConfig)
    assert built.learning_rate == 1e-5 and built.output_dir == run.settings["output_dir"]


@pytest.mark.parametrize(
    ("report_to", "kept"),
    [("tuneplane", "none"), ("[tuneplane]", "none"), ("[tensorboard, tuneplane]", ["tensorboard"])],
)
def test_report_to_tuneplane_is_the_platforms_callback(tmp_path: Path, report_to: str, kept: Any) -> None:
    """transformers refuses an integration it does not know as the trainer is built ("tuneplane is
    not supported, only azure_ml, ... are supported"): the name is the platform's callback, which the
    run has already, so it is taken out and the rest reaches the trainer."""
    _require("trl")
    from transformers.integrations import get_reporting_integration_callbacks
    from trl import SFTConfig

    run = _run(tmp_path, CONFIG + f"report_to: {report_to}\n", own_keys=("judge_max_length",))
    assert run.settings["report_to"] == kept
    built = run.trl_config(SFTConfig)
    assert "tuneplane" not in get_reporting_integration_callbacks(built.report_to)  # raised before


class Recorder:
    """Stands where a TRL trainer class goes: keeps the keywords train() would construct it with."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_the_trainer_gets_the_run_and_a_keyword_replaces_a_default(tmp_path: Path) -> None:
    _require("trl")
    _require("peft")
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import RewardConfig

    run = _run(tmp_path, CONFIG, "--validation-data", str(tmp_path / "missing.jsonl"), own_keys=("judge_max_length",))
    built = run.trainer(
        Recorder, RewardConfig, peft_task_type="SEQ_CLS", model="replaced", train_dataset=["row"], eval_dataset=None
    ).kwargs
    assert built["model"] == "replaced" and built["train_dataset"] == ["row"] and built["eval_dataset"] is None
    assert isinstance(built["args"], RewardConfig) and built["args"].learning_rate == 1e-5
    assert isinstance(built["peft_config"], LoraConfig)
    assert (built["peft_config"].r, built["peft_config"].task_type) == (8, "SEQ_CLS")
    [callback] = built["callbacks"]
    assert isinstance(callback, TrainerCallback)  # the SDK's callback, wrapped for the Trainer


def test_data_sets_load_from_local_files(tmp_path: Path) -> None:
    _require("datasets")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"p{i}", "completion": "c"}) + "\n" for i in range(3)))
    run = _run(tmp_path, CONFIG, "--train-data", str(rows), "--validation-data", str(tmp_path))
    built = run.trainer(Recorder, dict, peft_config=None, callbacks=[]).kwargs
    assert built["train_dataset"]["prompt"] == ["p0", "p1", "p2"]
    assert len(built["eval_dataset"]) == 3  # a folder: every data file in it
    assert built["args"]["output_dir"] == run.settings["output_dir"]


def test_reward_weights_must_match_the_reward_functions_before_anything_loads(tmp_path: Path) -> None:
    run = _run(tmp_path, CONFIG + "reward_weights: [1.0, 0.1]\n")

    def never(**_: Any) -> None:
        pytest.fail("the trainer was built despite mismatched reward weights")

    funcs = [trl_rewards.accuracy_reward, trl_rewards.format_reward, trl_rewards.format_reward]
    with pytest.raises(SystemExit, match=r"reward_weights is 2 weights for 3 reward functions"):
        run.trainer(never, dict, reward_funcs=funcs)
    assert (
        run.trainer(Recorder, dict, reward_funcs=funcs[:2], train_dataset=[], peft_config=None, callbacks=[]).kwargs[
            "reward_funcs"
        ]
        == funcs[:2]
    )


def test_save_writes_final_and_drops_the_model_card(tmp_path: Path) -> None:
    run = _run(tmp_path, CONFIG)

    class Trained:
        def save_model(self, folder: str) -> None:
            Path(folder).mkdir(parents=True)
            (Path(folder).parent / "README.md").write_text("model card")

        def is_world_process_zero(self) -> bool:
            return True

    run.save(Trained())
    checkpoints = tmp_path / "out" / "checkpoints"
    assert (checkpoints / "final").is_dir() and not (checkpoints / "README.md").exists()


def test_a_new_attempt_trains_from_the_checkpoint_the_launcher_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path, CONFIG)
    resumed_from: list[str | None] = []

    class Trainer:
        def __init__(self, **_: Any) -> None:
            pass

        def train(self, resume_from_checkpoint: str | None = None) -> None:
            resumed_from.append(resume_from_checkpoint)

        def save_model(self, folder: str) -> None:
            Path(folder).mkdir(parents=True, exist_ok=True)

        def is_world_process_zero(self) -> bool:
            return True

    kwargs: dict[str, Any] = {"train_dataset": [], "peft_config": None, "callbacks": []}
    checkpoint = tmp_path / "out" / "checkpoints" / "checkpoint-6"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    monkeypatch.delenv("TUNEPLANE_RESUME_FROM", raising=False)
    assert run.train(Trainer, dict, **kwargs) == 0  # a first attempt starts afresh
    monkeypatch.setenv("TUNEPLANE_RESUME_FROM", str(checkpoint))
    run.train(Trainer, dict, **kwargs)
    # a marked folder of another loop is no Trainer checkpoint: named, and training starts afresh
    monkeypatch.setenv("TUNEPLANE_RESUME_FROM", str(tmp_path / "out" / "checkpoints" / "final"))
    run.train(Trainer, dict, **kwargs)
    assert resumed_from == [None, str(checkpoint), None]
    assert "is not a Trainer checkpoint (no trainer_state.json)" in capsys.readouterr().err


def test_experiments_scaffolded_before_training_run_still_import_their_helpers() -> None:
    """Their trainer_config.py re-exports these names: an existing lab's train.py keeps working."""
    import tuneplane.lifecycle.trl_support as support

    old = (
        "PLATFORM_KEYS",
        "SCRIPT_KEYS",
        "apply_overrides",
        "latest_checkpoint",
        "load_config",
        "load_split",
        "output_dir",
        "platform_callbacks",
        "read_overrides",
    )
    assert [name for name in old if not hasattr(support, name)] == []


# ── the templates ──────────────────────────────────────────────────────────────────────────────────


def _definitions(path: Path) -> dict[str, str]:
    """Each top-level function or class of a file, by a dump of its code without docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            found[node.name] = ast.dump(ast.Module(body=body, type_ignores=[]))
    return found


def test_no_two_trl_templates_carry_the_same_code() -> None:
    """Shared logic lives in tuneplane.lifecycle: a function or class copied between templates is refused."""
    seen: dict[str, str] = {}
    copies = []
    for path in sorted(p for t in TRL_TEMPLATES for p in t.glob("*.py")):
        where = str(path.relative_to(ROOT))
        for name, code in _definitions(path).items():
            if name != "main" and code in seen:
                copies.append(f"{where}:{name} = {seen[code]}")
            seen.setdefault(code, f"{where}:{name}")
        if path.name == "train.py":
            functions = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)]
            if [f.name for f in functions] != ["main"] or len(functions[0].body) > 8:
                copies.append(f"{where}: train.py should keep only main() with its method's part")
    assert copies == []


@pytest.mark.parametrize("template", TRL_TEMPLATES, ids=lambda p: p.parent.name)
def test_train_py_starts_from_the_sdk_folder_of_a_cluster_job(template: Path, tmp_path: Path) -> None:
    """A pod without the tuneplane wheel gets the package in an SDK folder on PYTHONPATH (CONTRACT §7): with
    only that and the standard library (`-S`: no site-packages), train.py reads its arguments."""
    sdk = tmp_path / "sdk"
    shutil.copytree(ROOT / "tuneplane", sdk / "tuneplane", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**NO_PYC, "PYTHONPATH": str(sdk)}
    done = subprocess.run(
        [sys.executable, "-S", "train.py", "--help"], cwd=template, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--overrides-json" in done.stdout and "accelerate launch" in done.stdout
    code = "import tuneplane.lifecycle.trl_support as s; print(s.__file__)"
    where = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=template, env=env, capture_output=True, text=True, timeout=60
    )
    assert where.stdout.strip().startswith(str(sdk))


@pytest.mark.parametrize(
    "template", [t for t in TRL_TEMPLATES if (t / "rewards.py").is_file()], ids=lambda p: p.parent.name
)
def test_reward_weights_ship_one_per_reward_function(template: Path) -> None:
    code = compile((template / "rewards.py").read_text(), str(template / "rewards.py"), "exec")
    scope: dict[str, Any] = {}
    exec(code, scope)
    weights = load_yaml(template / "config.yaml")["reward_weights"]
    assert len(scope["REWARD_FUNCTIONS"]) == len(weights)
    assert scope["completion_text"]([{"role": "assistant", "content": "\\boxed{7}"}]) == "\\boxed{7}"
    assert scope["final_answer"]("so it is 1,234.") == "1234"


# What the templates' rewards.py read before the move, kept as the oracle: the shared functions
# must score every text as they did.
def _old_normalise(text: str) -> str:
    return " ".join(text.replace(",", "").strip().lower().split()).rstrip(".")


def _old_final_answer(text: str) -> str | None:
    boxed, numbers = re.findall(r"\\boxed\{([^{}]*)\}", text), re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return _old_normalise(boxed[-1]) if boxed else _old_normalise(numbers[-1]) if numbers else None


def _old_accuracy(completion: str, expected: str) -> float:
    got, want = _old_final_answer(completion), _old_final_answer(expected) or _old_normalise(expected)
    return 1.0 if got is not None and got == want else 0.0


TEXTS = st.lists(
    st.sampled_from(["\\boxed{", "}", "{", "1", "23", ",", ".", "-", " ", "x", "Paris", "4.5"]), max_size=12
).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS, TEXTS)
def test_the_shared_rewards_read_answers_as_the_templates_did(text: str, expected: str) -> None:
    assert trl_rewards.final_answer(text) == _old_final_answer(text)
    boxed = "so \\boxed{" + expected.replace("}", "").replace("{", "") + "}"
    for completion in (text, boxed, expected):
        assert trl_rewards.accuracy_reward([completion], answer=[expected]) == [_old_accuracy(completion, expected)]
    assert trl_rewards.format_reward([text]) == [0.0 if _old_final_answer(text) is None else 1.0]


# ── the rendered cluster command (Kubernetes; Slurm's container runs the same one) ───────────────────

METHODS = [t.parent.name for t in TRL_TEMPLATES]


@pytest.fixture(scope="module")
def cluster_lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from support.render import make_lab

    return make_lab(tmp_path_factory.mktemp("trl-render") / "lab", {f"trl-{m}": f"trl/{m}" for m in METHODS})


@pytest.mark.parametrize("method", METHODS)
def test_the_rendered_pod_command_gives_train_py_the_sdk(method: str, cluster_lab: Any, tmp_path: Path) -> None:
    """The trainer container's command puts the SDK folder on PYTHONPATH for the process that runs the
    experiment's train.py; run here with only that folder and the standard library, train.py starts."""
    from support.render import INPUTS, build, main_container, request

    (doc,) = build(cluster_lab, request(f"trl-{method}", "h200", inputs=dict(INPUTS)))[2]
    python, flag, bootstrap, _sdk_in_pod, mode = main_container(doc["spec"]["template"])["command"]
    assert (python, flag, mode) == ("python3", "-c", "prepend")
    sdk = tmp_path / "sdk"
    shutil.copytree(ROOT / "tuneplane", sdk / "tuneplane", ignore=shutil.ignore_patterns("__pycache__"))
    work = Path(cluster_lab.root)
    (tmp_path / "work" / ".tuneplane").mkdir(parents=True)
    train = work / "experiments" / f"trl-{method}" / "train.py"
    launch = {"argv": [sys.executable, "-S", str(train), "--help"], "mode": "direct", "cwd": str(work)}
    document = {
        "apiVersion": "tuneplane/v1",
        "kind": "TrainingJob",
        "spec": {"framework": {"kind": "trl"}},
        "launch": launch,
    }
    (tmp_path / "work" / ".tuneplane" / "jobspec.json").write_text(json.dumps(document))
    env = {**NO_PYC, "TUNEPLANE_WORK_DIR": str(tmp_path / "work")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-S", "-c", bootstrap, str(sdk), mode], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--overrides-json" in done.stdout and "accelerate launch" in done.stdout
