"""compile: one FrameworkAdapter per framework, each with its framework's real launch conventions,
the environment contract in a fixed order, and the refusals every adapter makes from the JobSpec."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from support.render import (
    CONTRACT_ORDER,
    INPUTS,
    OBS_URL,
    RUN_ID,
    make_lab,
    request,
    resolve_run,
)

from tuneplane import __version__
from tuneplane.errors import UsageError
from tuneplane.lab.load import Lab
from tuneplane.models.jobspec import JobSpec, LockedPluginRef
from tuneplane.plan.adapters import ADAPTERS, compile_plan
from tuneplane.plan.environment import job_env, secret_env, spec_to_env
from tuneplane.plan.names import object_name
from tuneplane.render.manifests import jobspec_document

RUN = "/mnt/tuneplane/runs/alice/{exp}/" + RUN_ID


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("adapters") / "lab")


def plan_for(lab: Lab, exp: str, profile: str = "h200", **fields: Any) -> Any:
    return compile_plan(resolve_run(lab, request(exp, profile, **fields)))


def paths(exp: str) -> tuple[str, str, str]:
    run = RUN.format(exp=exp)
    return f"{run}/work", f"{run}/work/experiments/{exp}", f"{run}/out"


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def with_body(spec: JobSpec, **changes: Any) -> JobSpec:
    return spec.model_copy(update={"spec": spec.spec.model_copy(update=changes)})


# ── the launch conventions of each framework ────────────────────────────────────────────────────────


def test_every_framework_has_an_adapter() -> None:
    assert set(ADAPTERS) == {"custom", "pytorch", "trl", "verl", "nemo-rl", "evalkit", "ms-swift", "openrlhf"}


def test_custom_runs_bash_on_the_absolute_train_sh_from_the_package_root(lab: Lab) -> None:
    work, exp_dir, _ = paths("custom-exp")
    plan = plan_for(lab, "custom-exp")
    assert plan.argv == ["bash", f"{exp_dir}/train.sh"]
    assert (plan.cwd, plan.mode, plan.in_process) == (work, "direct", False)
    assert plan.env["TUNEPLANE_RECIPE"] == "custom" and plan.env["TUNEPLANE_FRAMEWORK"] == "custom"
    assert plan.env["TUNEPLANE_EXTERNAL_OBSERVABILITY_URL"] == OBS_URL
    assert "PYTHONPATH" not in plan.env


def test_custom_on_several_nodes_gets_the_rendezvous(lab: Lab) -> None:
    plan = plan_for(lab, "custom-exp", "h200:16")
    name = object_name("custom-exp", RUN_ID)
    assert plan.mode == "process-group" and plan.nodes == 2
    assert plan.env["MASTER_ADDR"] == f"{name}-trainer-0-0.{name}" and plan.env["MASTER_PORT"] == "29500"


def test_pytorch_one_node_is_torchrun_standalone(lab: Lab) -> None:
    work, exp_dir, out = paths("pytorch-exp")
    spec = resolve_run(lab, request("pytorch-exp", "h200:4", set={"epochs": 2}))
    plan = compile_plan(spec)
    assert plan.argv[:8] == [
        "torchrun",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "4",
        "-m",
        "tuneplane.launcher",
    ]
    assert plan.argv[8:14] == [
        f"{exp_dir}/train.py",
        "--config",
        f"{exp_dir}/config.yaml",
        "--output-dir",
        out,
        "--overrides-json",
    ]
    assert json.loads(plan.argv[14]) == spec.spec.hyperparams and json.loads(plan.argv[14])["epochs"] == 2
    assert (plan.mode, plan.nodes, plan.procs_per_node, plan.cwd) == ("process-group", 1, 4, work)


def test_pytorch_across_nodes_rendezvous_on_the_first_pod(lab: Lab) -> None:
    plan = plan_for(lab, "pytorch-exp", "h200:24")
    name = object_name("pytorch-exp", RUN_ID)
    assert "--standalone" not in plan.argv
    assert after(plan.argv, "--nnodes") == "3" and after(plan.argv, "--nproc_per_node") == "8"
    # A static rendezvous (as Kubeflow Trainer v2 does it): torchrun takes the master and the node's rank
    # from the PET_* variables; nothing is negotiated through DNS at start-up.
    assert after(plan.argv, "--rdzv_backend") == "static"
    assert "--rdzv_endpoint" not in plan.argv and "--rdzv_id" not in plan.argv
    assert plan.env["PET_MASTER_ADDR"] == plan.env["MASTER_ADDR"] == f"{name}-trainer-0-0.{name}"
    assert plan.env["PET_MASTER_PORT"] == "29500" and plan.env["PET_NNODES"] == "3"


def test_pytorch_on_a_cpu_profile_starts_one_process(lab: Lab) -> None:
    plan = plan_for(lab, "pytorch-exp", "cpu")
    assert after(plan.argv, "--nproc_per_node") == "1" and plan.procs_per_node == 1


def test_trl_is_accelerate_launch_with_inputs_and_outputs(lab: Lab) -> None:
    _, exp_dir, out = paths("trl-sft-exp")
    plan = plan_for(lab, "trl-sft-exp", "h200")
    argv = plan.argv
    assert argv[:2] == ["accelerate", "launch"]
    assert after(argv, "--num_processes") == "8" and after(argv, "--num_machines") == "1"
    assert after(argv, "--machine_rank") == "0" and "--multi_gpu" in argv
    assert argv[argv.index("-m") + 1 : argv.index("-m") + 3] == ["tuneplane.launcher", f"{exp_dir}/train.py"]
    assert (after(argv, "--model"), after(argv, "--train-data"), after(argv, "--validation-data")) == (
        INPUTS["model"],
        INPUTS["train_data"],
        INPUTS["validation_data"],
    )
    assert after(argv, "--output-dir") == out and after(argv, "--config") == f"{exp_dir}/config.yaml"
    assert "--logging-dir" not in argv  # not a flag the recipe's entrypoint declares: the template logs under out/logs


def test_trl_across_nodes_takes_the_machine_rank_from_the_pod(lab: Lab) -> None:
    plan = plan_for(lab, "trl-sft-exp", "h200:16")
    name = object_name("trl-sft-exp", RUN_ID)
    assert plan.argv[:3] == ["sh", "-c", 'exec accelerate launch --machine_rank "$TUNEPLANE_NODE_RANK" "$@"']
    rest = plan.argv[4:]
    assert after(rest, "--num_processes") == "16" and after(rest, "--num_machines") == "2"
    assert after(rest, "--main_process_ip") == f"{name}-trainer-0-0.{name}"
    assert after(rest, "--main_process_port") == "29500"
    # the shell sees the fixed script only; every value travels as a positional argument
    assert shlex.split(plan.argv[2]) == [
        "exec",
        "accelerate",
        "launch",
        "--machine_rank",
        "$TUNEPLANE_NODE_RANK",
        "$@",
    ]


def test_verl_grpo_is_a_ray_driver_with_hydra_json_overrides(lab: Lab) -> None:
    _, exp_dir, out = paths("verl-grpo-exp")
    spec = resolve_run(lab, request("verl-grpo-exp", "h200:16"))
    plan = compile_plan(spec)
    argv = plan.argv
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert after(argv, "--config-path") == exp_dir and after(argv, "--config-name") == "config"
    overrides = dict(a.split("=", 1) for a in argv if "=" in a)
    assert json.loads(overrides["actor_rollout_ref.model.path"]) == INPUTS["model"]
    assert json.loads(overrides["data.train_files"]) == INPUTS["train_data"]
    assert json.loads(overrides["data.val_files"]) == INPUTS["validation_data"]
    assert (overrides["trainer.nnodes"], overrides["trainer.n_gpus_per_node"]) == ("2", "8")
    assert json.loads(overrides["trainer.default_local_dir"]) == f"{out}/checkpoints"
    for path, value in spec.spec.hyperparams.items():
        assert json.loads(overrides[path]) == value
    assert (plan.mode, plan.nodes, plan.in_process) == ("ray-driver", 2, True)
    # the platform's keys come last, so they win over anything before them
    assert argv[-4:] == [
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=8",
        f"trainer.default_local_dir={json.dumps(out + '/checkpoints')}",
        'trainer.resume_mode="auto"',
    ]


@pytest.mark.parametrize("exp", ["verl-grpo-exp", "verl-sft-exp"])
def test_verl_resumes_from_the_newest_checkpoint_in_its_checkpoint_dir(lab: Lab, exp: str) -> None:
    """verl's resume_mode auto loads what latest_checkpointed_iteration.txt names in default_local_dir:
    under $OUT/checkpoints, where the launcher finds it too; a template's own resume_mode loses."""
    _, _, out = paths(exp)
    argv = plan_for(lab, exp, "h200:16").argv
    overrides = [a for a in argv if a.startswith(("trainer.resume_mode=", "trainer.default_local_dir="))]
    assert overrides == [f"trainer.default_local_dir={json.dumps(out + '/checkpoints')}", 'trainer.resume_mode="auto"']
    assert argv[-1] == 'trainer.resume_mode="auto"'


def test_verl_sft_runs_under_torchrun(lab: Lab) -> None:
    plan = plan_for(lab, "verl-sft-exp", "h200:16")
    assert plan.argv[0] == "torchrun" and plan.mode == "process-group"
    launcher = plan.argv.index("tuneplane.launcher")
    assert plan.argv[launcher + 1 : launcher + 3] == ["-m", "verl.trainer.sft_trainer"]
    assert "trainer.nnodes=2" in plan.argv


def test_nemo_rl_passes_config_topology_checkpoint_and_log_dirs(lab: Lab) -> None:
    _, exp_dir, out = paths("nemo-exp")
    spec = resolve_run(lab, request("nemo-exp", "h200:16", set={"num_generations_per_prompt": 8}))
    plan = compile_plan(spec)
    argv = plan.argv
    # NeMo-RL's own driver in the image; the experiment has no run.py of its own
    assert argv[:4] == ["python3", "/opt/nemo-rl/examples/run_grpo.py", "--config", f"{exp_dir}/config.yaml"]
    assert "cluster.num_nodes=2" in argv and "cluster.gpus_per_node=8" in argv
    # NeMo-RL resumes from the newest step_<n> in checkpoint_dir; the launcher looks in $OUT/checkpoints
    assert f"checkpointing.checkpoint_dir={json.dumps(out + '/checkpoints')}" in argv
    assert f"logger.log_dir={json.dumps(out + '/logs')}" in argv
    assert f"policy.model_name={json.dumps(INPUTS['model'])}" in argv
    assert "grpo.num_generations_per_prompt=8" in argv
    assert plan.mode == "ray-driver"


def test_evalkit_runs_the_module_with_model_suites_and_output_dir(lab: Lab) -> None:
    _, exp_dir, out = paths("evalkit-exp")
    plan = plan_for(lab, "evalkit-exp", "h200:2", set={"suites": "gsm8k,mmlu"})
    argv = plan.argv
    assert argv[:3] == ["python3", "-m", "tuneplane.lifecycle.benchmark_eval"]
    assert (after(argv, "--model"), after(argv, "--suites"), after(argv, "--output-dir")) == (
        INPUTS["model"],
        "gsm8k,mmlu",
        out,
    )
    assert after(argv, "--config") == f"{exp_dir}/config.yaml" and plan.mode == "direct"


def test_evalkit_refuses_several_nodes(lab: Lab) -> None:
    with pytest.raises(UsageError, match="evalkit/benchmark runs on one node"):
        plan_for(lab, "evalkit-exp", "h200:16")


@pytest.mark.parametrize("exp", ["trl-sft-exp", "verl-grpo-exp", "nemo-exp"])
def test_export_runs_the_recipe_export_entry(lab: Lab, exp: str) -> None:
    _, exp_dir, out = paths(exp)
    ckpt = "/mnt/tuneplane/runs/alice/x/r/out/checkpoints/final"
    plan = plan_for(lab, exp, operation="export", inputs={"checkpoint": ckpt})
    assert plan.argv == ["python3", f"{exp_dir}/export.py", "--output-dir", out, "--checkpoint", ckpt]
    assert {a.kind for a in plan.artifacts} == {"export", "log"}
    assert plan.in_process is True


def test_eval_runs_the_recipe_eval_entry(lab: Lab) -> None:
    _, exp_dir, out = paths("trl-sft-exp")
    plan = plan_for(lab, "trl-sft-exp", operation="eval", inputs={"checkpoint": "/ckpt", "data": "d.jsonl"})
    assert plan.argv == [
        "python3",
        f"{exp_dir}/eval.py",
        "--data",
        "d.jsonl",
        "--report",
        f"{out}/eval/report.json",
        "--model",
        "/ckpt",
        "--output-dir",
        out,
    ]
    assert {a.kind for a in plan.artifacts} == {"evaluation", "log"}


def test_eval_needs_data(lab: Lab) -> None:
    with pytest.raises(UsageError, match="trl/sft eval needs --data"):
        plan_for(lab, "trl-sft-exp", operation="eval", inputs={"checkpoint": "/ckpt"})


def test_a_checkpoint_format_the_recipe_does_not_write_is_refused(lab: Lab) -> None:
    with pytest.raises(UsageError, match="trl/sft writes safetensors checkpoints, not 'gguf'"):
        plan_for(lab, "trl-sft-exp", operation="export", inputs={"checkpoint": "/c", "checkpoint_format": "gguf"})
    assert (
        plan_for(
            lab,
            "trl-sft-exp",
            operation="export",
            inputs={"checkpoint": "/c", "checkpoint_format": "safetensors"},
        ).argv[0]
        == "python3"
    )


def test_artifacts_of_a_training_run(lab: Lab) -> None:
    plan = plan_for(lab, "trl-sft-exp")
    assert [(a.kind, a.pattern, a.format) for a in plan.artifacts] == [
        ("checkpoint", "checkpoints/*", "safetensors"),
        ("log", "logs", ""),
    ]


def test_hydra_values_refuse_control_characters(lab: Lab) -> None:
    spec = resolve_run(lab, request("verl-grpo-exp"))
    bad = with_body(spec, inputs=spec.spec.inputs.model_copy(update={"model": "a\nb"}))
    with pytest.raises(UsageError, match="control character"):
        compile_plan(bad)


# ── refusals from the JobSpec alone (a JobSpec written by hand gets them too) ───────────────────────


def test_compile_refuses_custom_export(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp"))
    with pytest.raises(UsageError) as info:
        compile_plan(with_body(spec, operation="export"))
    assert info.value.message.startswith("custom adapter refuses export")


def test_compile_refuses_custom_external_without_url(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp"))
    framework = spec.spec.framework.model_copy(update={"observability_url": ""})
    with pytest.raises(UsageError) as info:
        compile_plan(with_body(spec, framework=framework))
    assert info.value.message == "custom external observability requires spec.framework.observability_url"


def test_compile_refuses_a_url_with_platform_observability(lab: Lab) -> None:
    spec = resolve_run(lab, request("pytorch-exp"))
    framework = spec.spec.framework.model_copy(update={"observability_url": OBS_URL})
    with pytest.raises(UsageError, match="uses platform observability"):
        compile_plan(with_body(spec, framework=framework))


def test_compile_refuses_a_custom_entrypoint_outside_the_experiment(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp"))
    recipe = spec.spec.recipe.model_copy(update={"entrypoint": "../../../bin/sh"})
    with pytest.raises(UsageError) as info:
        compile_plan(with_body(spec, recipe=recipe))
    assert info.value.message == "custom entrypoint is missing or escapes the experiment directory"


def test_compile_refuses_custom_without_image(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp"))
    with pytest.raises(UsageError, match="custom/custom needs --image"):
        compile_plan(with_body(spec, image=""))


@pytest.mark.parametrize("exp", ["custom-exp", "evalkit-exp"])
def test_compile_refuses_algorithm_plugins(lab: Lab, exp: str) -> None:
    spec = resolve_run(lab, request(exp))
    plugin = LockedPluginRef(
        id="alice/opsd",
        name="opsd",
        version="1.0",
        digest="sha256:" + "0" * 64,
        capability="algorithm",
        entrypoint="opsd:install",
    )
    with pytest.raises(UsageError, match="alice/opsd@1.0 is an algorithm plugin; the .* adapter refuses"):
        compile_plan(with_body(spec, plugins=[plugin]))
    other = plugin.model_copy(update={"capability": "environment"})
    assert compile_plan(with_body(spec, plugins=[other])).argv


def test_compile_refuses_missing_inputs(lab: Lab) -> None:
    spec = resolve_run(lab, request("trl-sft-exp"))
    inputs = spec.spec.inputs.model_copy(update={"model": "", "train_data": ""})
    with pytest.raises(UsageError) as info:
        compile_plan(with_body(spec, inputs=inputs))
    assert info.value.message == "The trl recipe requires explicit: --model --train-data"


def test_compile_refuses_too_few_gpus(lab: Lab) -> None:
    with pytest.raises(UsageError, match="verl/sft needs at least 1 GPU"):
        plan_for(lab, "verl-sft-exp", "cpu")


def test_compile_refuses_an_unknown_framework(lab: Lab) -> None:
    spec = resolve_run(lab, request("pytorch-exp"))
    framework = spec.spec.framework.model_copy(update={"kind": "jax"})
    with pytest.raises(UsageError, match="no adapter for framework 'jax'"):
        compile_plan(with_body(spec, framework=framework))


# ── the environment contract (CONTRACT §6) ──────────────────────────────────────────────────────────


def test_spec_to_env_has_every_variable_in_a_fixed_order(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp", "h200:16"))
    env = spec_to_env(spec, ingest_endpoint="http://ingest:8080")
    assert list(env) == CONTRACT_ORDER
    work, exp_dir, out = paths("custom-exp")
    assert (env["TUNEPLANE_WORK_DIR"], env["TUNEPLANE_EXP_DIR"], env["TUNEPLANE_OUT_DIR"]) == (
        work,
        exp_dir,
        out,
    )
    assert (env["TUNEPLANE_CLUSTER_NUM_NODES"], env["TUNEPLANE_CLUSTER_GPUS_PER_NODE"]) == ("2", "8")
    assert env["TUNEPLANE_CLUSTER_PROCS_PER_NODE"] == "8"
    assert (env["TUNEPLANE_JOB_ENABLED"], env["TUNEPLANE_JOB_ENDPOINT"]) == ("1", "http://ingest:8080")
    assert env["TUNEPLANE_JOB_RUN_ID"] == env["TUNEPLANE_RUN_ID"] == RUN_ID
    assert env["TUNEPLANE_CORE_VERSION"] == __version__ and env["TUNEPLANE_JOB_MONITOR_INTERVAL"] == "10"
    assert env["TUNEPLANE_RECIPE_DIGEST"] == spec.spec.recipe.digest
    assert (env["CLUSTER_PROFILE"], env["NRL_RUN_ID"]) == ("h200", RUN_ID)  # as StarForge set them
    assert env["HF_HOME"] == "/mnt/tuneplane/cache/huggingface"
    assert all(isinstance(v, str) for v in env.values())


def test_without_ingest_the_job_is_not_bound(lab: Lab) -> None:
    env = spec_to_env(resolve_run(lab, request("trl-sft-exp")))
    assert env["TUNEPLANE_JOB_ENABLED"] == "0"
    assert "TUNEPLANE_JOB_ENDPOINT" not in env and "TUNEPLANE_JOB_RUN_ID" not in env
    assert env["TUNEPLANE_RECIPE"] == "trl/sft" and "TUNEPLANE_EXTERNAL_OBSERVABILITY_URL" not in env


def test_secrets_are_references_never_values(lab: Lab) -> None:
    plan = plan_for(lab, "trl-sft-exp")
    assert "TUNEPLANE_JOB_TOKEN" not in plan.env and "HF_TOKEN" not in plan.env
    assert plan.secret_env == {"TUNEPLANE_JOB_TOKEN": "job-token", "HF_TOKEN": "hf-token"}
    assert secret_env(ingest_bound=False) == {"HF_TOKEN": "hf-token"}


def test_plan_env_is_the_contract_plus_the_adapter_variables(lab: Lab) -> None:
    spec = resolve_run(lab, request("pytorch-exp", "h200:16"))
    plan = compile_plan(spec)
    contract = spec_to_env(spec)
    assert list(plan.env)[: len(contract)] == list(contract)
    bound = job_env(spec, plan.env, ingest_endpoint="http://i")
    assert bound["TUNEPLANE_JOB_ENABLED"] == "1" and bound["MASTER_PORT"] == "29500"
    assert list(bound)[-5:] == ["MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES"]


def test_local_runs_keep_the_users_hf_cache(lab: Lab, tmp_path: Path) -> None:
    env = {"TUNEPLANE_STORAGE_ROOT": str(tmp_path), "HOME": str(tmp_path / "home")}
    spec = resolve_run(lab, request("pytorch-exp", "local"), env=env)
    assert spec_to_env(spec)["HF_HOME"] == str(tmp_path / "home" / ".cache" / "huggingface")
    spec = resolve_run(lab, request("pytorch-exp", "local"), env=env | {"HF_HOME": str(tmp_path / "hf")})
    assert spec_to_env(spec)["HF_HOME"] == str(tmp_path / "hf")


def test_recipe_plugins_are_comma_joined(lab: Lab) -> None:
    spec = resolve_run(lab, request("trl-sft-exp"))
    spec = with_body(spec, recipe=spec.spec.recipe.model_copy(update={"plugins": ["opsd", "grpo-fix"]}))
    assert spec_to_env(spec)["TUNEPLANE_RECIPE_PLUGINS"] == "opsd,grpo-fix"


# ── the JobSpec document the launcher reads ─────────────────────────────────────────────────────────


def test_the_launcher_reads_the_jobspec_document(lab: Lab, tmp_path: Path) -> None:
    from tuneplane.launcher import read_jobspec

    spec = resolve_run(lab, request("trl-sft-exp", "h200:16"))
    plan = compile_plan(spec)
    (tmp_path / ".tuneplane").mkdir()
    (tmp_path / ".tuneplane/jobspec.json").write_text(json.dumps(jobspec_document(spec, plan)))
    view = read_jobspec(tmp_path)
    assert view.launch.argv == plan.argv and view.launch.mode == "process-group"
    assert view.launch.cwd == plan.cwd and view.framework == "trl"
    assert dict(view.hyperparams) == spec.spec.hyperparams


# ── resuming through the job-side flag renderer (ms-swift, OpenRLHF) ─────────────────────────────────


@pytest.fixture(scope="module")
def cli_lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(
        tmp_path_factory.mktemp("cli-adapters") / "lab",
        experiments={
            "swift-sft": "ms-swift/sft",
            "swift-dpo": "ms-swift/dpo",
            "swift-megatron": "ms-swift/megatron-sft",
            "orlhf-sft": "openrlhf/sft",
        },
    )


def _renderer_options(lab: Lab, exp: str) -> list[str]:
    argv = plan_for(lab, exp, "h200:8", inputs=dict(INPUTS), image="registry.example/fw:1").argv
    start = argv.index("tuneplane.lifecycle.cli_flags")
    return list(argv[start + 1 : argv.index("--", start)])


@pytest.mark.parametrize("exp", ["swift-sft", "swift-dpo"])
def test_ms_swift_trainer_entrypoints_take_the_resume_checkpoint_as_their_flag(cli_lab: Lab, exp: str) -> None:
    options = _renderer_options(cli_lab, exp)
    assert after(options, "--resume-flag") == "resume_from_checkpoint"


def test_ms_swift_megatron_gets_no_resume_flag(cli_lab: Lab) -> None:
    assert "--resume-flag" not in _renderer_options(cli_lab, "swift-megatron")


def test_openrlhf_keeps_its_deepspeed_checkpoints_in_the_out_dir_and_loads_them(cli_lab: Lab) -> None:
    _, _, out = paths("orlhf-sft")
    options = _renderer_options(cli_lab, "orlhf-sft")
    platform = json.loads(after(options, "--platform-json"))
    assert platform["ckpt.path"] == f"{out}/checkpoints/deepspeed"  # not ./ckpt in the work dir
    assert platform["ckpt.load_enable"] is True and "--resume-flag" not in options
