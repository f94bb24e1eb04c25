"""resolve: experiment × recipe × run request × lab → JobSpec, and every refusal in the user's words."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.render import (
    CLUSTER_SETTINGS,
    COMMIT,
    CUSTOM_IMAGE,
    INPUTS,
    OBS_URL,
    RUN_ID,
    catalog,
    commit_all,
    make_lab,
    request,
    resolve_run,
)

from tuneplane import __version__
from tuneplane.errors import UsageError
from tuneplane.lab.load import Lab, load_lab
from tuneplane.models.jobspec import JobSpec
from tuneplane.plan.resolve import prepare_experiment, resolve_prepared, storage_root

PLUGIN_YAML = """\
schema: tuneplane/plugin/v1
name: {name}
version: 1.2.0
capability: {capability}
summary: scales advantages
entrypoint: {module}:install
load: {load}
requires:
  core: ">=0.1,<1"
scope: entrypoint
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("resolve") / "lab")


def refusal(lab: Lab, req: Any, **kw: Any) -> UsageError:
    with pytest.raises(UsageError) as info:
        resolve_run(lab, req, **kw)
    return info.value


# ── what a JobSpec holds ────────────────────────────────────────────────────────────────────────────


def test_trl_jobspec_pins_recipe_framework_image_inputs_and_provenance(lab: Lab) -> None:
    spec = resolve_run(lab, request("trl-sft-exp", "h200:16", requested_by="alice"))
    lock = json.loads((lab.root / "experiments/trl-sft-exp/recipe.lock.json").read_text())
    body = spec.spec
    assert (spec.api_version, spec.kind) == ("tuneplane/v1", "TrainingJob")
    assert (body.recipe.name, body.recipe.version) == ("trl/sft", lock["recipe"]["version"])
    assert (body.recipe.digest, body.recipe.manifest_digest, body.recipe.template_digest) == (
        lock["recipe"]["digest"],
        lock["recipe"]["manifest_digest"],
        lock["recipe"]["template_digest"],
    )
    assert (body.recipe.entrypoint_kind, body.recipe.entrypoint) == ("experiment", "train.py")
    assert (body.framework.kind, body.framework.version, body.framework.runtime_id) == (
        "trl",
        lock["framework"]["version"],
        lock["framework"]["runtime_id"],
    )
    assert body.image == "example/trl:1.10.0"
    assert body.inputs.model == INPUTS["model"] and body.inputs.validation_data == INPUTS["validation_data"]
    assert (body.resources.profile, body.resources.nodes, body.resources.gpus_per_node) == ("h200", 2, 8)
    assert body.recipe.adapter.launcher == "accelerate" and "output_dir" in body.recipe.adapter.platform_owned
    config = (lab.root / "experiments/trl-sft-exp/config.yaml").read_bytes()
    assert spec.provenance.model_dump() == {
        "commit": COMMIT,
        "dirty": False,
        "config_sha256": "sha256:" + hashlib.sha256(config).hexdigest(),
        "tool_version": __version__,
        "requested_by": "alice",
    }


def test_paths_follow_the_storage_layout(lab: Lab) -> None:
    paths = resolve_run(lab, request("pytorch-exp")).spec.paths
    run_dir = f"/mnt/tuneplane/runs/alice/pytorch-exp/{RUN_ID}"
    assert paths.model_dump() == {
        "storage_root": "/mnt/tuneplane",
        "run_dir": run_dir,
        "work_dir": f"{run_dir}/work",
        "exp_dir": f"{run_dir}/work/experiments/pytorch-exp",
        "out_dir": f"{run_dir}/out",
        "hf_home": "",  # a cluster job uses the cache on the storage volume
    }


@pytest.mark.parametrize(
    "profile, shape",
    [("h200", (1, 8)), ("h200:4", (1, 4)), ("h200:8", (1, 8)), ("h200:24", (3, 8)), ("cpu", (1, 0))],
)
def test_profile_shapes(lab: Lab, profile: str, shape: tuple[int, int]) -> None:
    res = resolve_run(lab, request("pytorch-exp", profile)).spec.resources
    assert (res.nodes, res.gpus_per_node) == shape and res.local is False


def test_shape_rules_refuse_partial_nodes(lab: Lab) -> None:
    error = refusal(lab, request("pytorch-exp", "h200:12"))
    assert "12 GPUs do not fill whole h200 nodes of 8 GPUs" in error.message


def test_hyperparams_are_config_then_defaults_then_set_keyed_by_path(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"})
    config = lab.root / "experiments/img/config.yaml"
    config.write_text(config.read_text().replace("epochs: 3", "epochs: 7").replace("seed: 0\n", ""))
    commit_all(lab.root)
    spec = resolve_run(lab, request("img", set={"batch_size": 32, "learning_rate": 1}))
    params = catalog().recipe("pytorch/image-classification").params
    hp = spec.spec.hyperparams
    assert hp["epochs"] == 7  # config.yaml beats the recipe default
    assert hp["seed"] == params["seed"].default  # absent from config: the default
    assert hp["batch_size"] == 32  # --set beats config.yaml
    assert hp["learning_rate"] == 1.0 and isinstance(hp["learning_rate"], float)  # an int for a float param
    assert set(hp) == {p.path for p in params.values()}
    assert list(hp) == sorted(hp)


def test_set_may_name_the_config_path(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"v": "verl/grpo"})
    params = catalog().recipe("verl/grpo").params
    name, param = next((n, p) for n, p in params.items() if p.path != n and p.type == "float")
    by_name = resolve_run(lab, request("v", set={name: 0.5}, inputs=INPUTS)).spec.hyperparams
    by_path = resolve_run(lab, request("v", set={param.path: 0.5}, inputs=INPUTS)).spec.hyperparams
    assert by_name[param.path] == by_path[param.path] == 0.5


def test_custom_set_values_land_in_hyperparams_as_written(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp", set={"anything.goes": "x", "lr": 0.1}))
    assert spec.spec.hyperparams == {"anything.goes": "x", "lr": 0.1}


def test_invalid_config_value_is_refused_naming_the_file(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"})
    config = lab.root / "experiments/img/config.yaml"
    config.write_text(config.read_text().replace("epochs: 3", "epochs: many"))
    error = refusal(lab, request("img"))
    assert "experiments/img/config.yaml: epochs" in error.message and "integer" in error.message


def test_unknown_hyperparameter_lists_the_known_ones(lab: Lab) -> None:
    error = refusal(lab, request("pytorch-exp", set={"learning_rte": 0.1}))
    assert error.message == "unknown hyperparameter 'learning_rte' for pytorch/image-classification"
    assert "learning_rate" in error.hint


def test_dirty_tree_is_refused_unless_allowed(lab: Lab) -> None:
    error = refusal(lab, request("pytorch-exp"), dirty=True)
    assert "uncommitted changes" in error.message and "--allow-dirty" in error.hint
    spec = resolve_run(lab, request("pytorch-exp"), dirty=True, allow_dirty=True)
    assert spec.provenance.dirty is True


def test_a_pinned_commit_wins(lab: Lab) -> None:
    pinned = "f" * 40
    assert resolve_run(lab, request("pytorch-exp", commit=pinned)).provenance.commit == pinned


def test_experiment_mismatch_is_refused(lab: Lab) -> None:
    from tuneplane.plan.resolve import resolve

    with pytest.raises(UsageError, match="names experiment 'pytorch-exp', not 'trl-sft-exp'"):
        resolve(lab, "trl-sft-exp", request("pytorch-exp"), commit=COMMIT, dirty=False, catalog=catalog(), env={})


def test_storage_user_is_one_safe_path_segment(tmp_path: Path) -> None:
    lab = make_lab(
        tmp_path / "lab",
        {"img": "pytorch/image-classification"},
        settings=CLUSTER_SETTINGS.replace("user: alice", 'user: "../../etc\\nroot: x"'),
    )
    spec = resolve_run(lab, request("img"))
    assert spec.metadata.user == "etc-root-x"
    assert spec.spec.paths.run_dir == f"/mnt/tuneplane/runs/etc-root-x/img/{RUN_ID}"


# ── local backend paths ─────────────────────────────────────────────────────────────────────────────


def test_local_profile_uses_the_local_storage_root(lab: Lab, tmp_path: Path) -> None:
    spec = resolve_run(lab, request("pytorch-exp", "local"), env={"TUNEPLANE_STORAGE_ROOT": str(tmp_path)})
    assert spec.spec.resources.local is True
    assert spec.spec.paths.out_dir == f"{tmp_path}/runs/alice/pytorch-exp/{RUN_ID}/out"


def test_local_root_falls_back_to_the_user_data_dir(lab: Lab, tmp_path: Path) -> None:
    assert storage_root(lab, True, {"XDG_DATA_HOME": str(tmp_path)}) == str(tmp_path / "tuneplane")
    assert storage_root(lab, True, {"HOME": str(tmp_path)}) == str(tmp_path / ".local/share/tuneplane")
    assert storage_root(lab, False, {"TUNEPLANE_STORAGE_ROOT": "/elsewhere"}) == "/mnt/tuneplane"


def test_a_local_backend_lab_runs_every_profile_locally(tmp_path: Path) -> None:
    lab = make_lab(
        tmp_path / "lab",
        {"img": "pytorch/image-classification"},
        settings=CLUSTER_SETTINGS.replace("backend: kubernetes", "backend: local").replace(
            "root: /mnt/tuneplane}", "root: /mnt/tuneplane, local_root: store}"
        ),
    )
    spec = resolve_run(lab, request("img", "h200:8"))
    assert spec.spec.resources.local is True
    assert spec.spec.paths.storage_root == str(lab.root / "store")


# ── images (CONTRACT §8) ────────────────────────────────────────────────────────────────────────────


def test_image_order_flag_then_lab_default_then_registry_then_pin(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace("    trl: example/trl:1.10.0\n", "")
    settings = settings.replace("    verl: example/verl:0.5.0\n", "")
    lab = make_lab(tmp_path / "lab", {"t": "trl/sft", "verl-sft-exp": "verl/sft"}, settings=settings)
    runtime_id = json.loads((lab.root / "experiments/t/recipe.lock.json").read_text())["framework"]["runtime_id"]
    registry = {"TUNEPLANE_RUNTIME_IMAGES": json.dumps({runtime_id: "example/trl-registry:1"})}
    assert (
        resolve_run(lab, request("t", image="example/mine:2", inputs=INPUTS), env=registry).spec.image
        == "example/mine:2"
    )
    assert resolve_run(lab, request("t", inputs=INPUTS), env=registry).spec.image == "example/trl-registry:1"
    assert resolve_run(lab, request("t", inputs=INPUTS)).spec.image == "huggingface/trl:1.16.0"  # the catalog pin
    error = refusal(lab, request("verl-sft-exp", inputs=INPUTS))  # verl publishes no image per release
    assert "no image for verl/sft" in error.message and "TUNEPLANE_RUNTIME_IMAGES" in error.hint
    bad = refusal(lab, request("t", inputs=INPUTS), env={"TUNEPLANE_RUNTIME_IMAGES": "{not json"})
    assert "TUNEPLANE_RUNTIME_IMAGES is not valid JSON" in bad.message


def test_lab_default_beats_the_registry(lab: Lab) -> None:
    env = {"TUNEPLANE_RUNTIME_IMAGES": json.dumps({"trl-1.10.0": "example/other:1"})}
    assert resolve_run(lab, request("trl-sft-exp"), env=env).spec.image == "example/trl:1.10.0"


def test_empty_allowlist_refuses_custom_images_but_not_catalog_defaults(lab: Lab) -> None:
    env = {"TUNEPLANE_ALLOWED_IMAGE_REGISTRIES": ""}
    error = refusal(lab, request("custom-exp"), env=env)
    assert "'registry.example.com' is not allowed" in error.message and "administrator" in error.hint
    assert resolve_run(lab, request("trl-sft-exp"), env=env).spec.image == "example/trl:1.10.0"


def test_digest_policy_applies_to_the_resolved_image(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace("images:\n", "images:\n  require_digest: true\n")
    # every image of the pod, the checkout init container's included, must be pinned
    pinned_init = "alpine/git@sha256:" + "b" * 64
    unpinned = make_lab(tmp_path / "unpinned", {"t": "trl/sft"}, settings=settings)
    with pytest.raises(UsageError, match=r"cluster.init_image .*not pinned by digest"):
        resolve_run(unpinned, request("t", image="example/trl@sha256:" + "a" * 64, inputs=INPUTS))
    settings = settings.replace(
        "  ttl_seconds_after_finished: 86400\n", f"  ttl_seconds_after_finished: 86400\n  init_image: {pinned_init}\n"
    )
    lab = make_lab(tmp_path / "lab", {"t": "trl/sft"}, settings=settings)
    assert "not pinned by digest" in refusal(lab, request("t", inputs=INPUTS)).message
    pinned = "example/trl@sha256:" + "a" * 64
    assert resolve_run(lab, request("t", image=pinned, inputs=INPUTS)).spec.image == pinned


# ── plugins ─────────────────────────────────────────────────────────────────────────────────────────


def _plugin_lab(root: Path, method: str, capability: str = "algorithm", load: str = "deferred") -> Lab:
    from tuneplane.author.plugin_lock import lock_plugin

    files = {
        "plugins/opsd/plugin.yaml": PLUGIN_YAML.format(
            name="opsd", capability=capability, module="opsd_patch", load=load
        ),
        "plugins/opsd/opsd_patch/__init__.py": "def install(params, **ctx):\n    pass\n",
    }
    lab = make_lab(root, {"exp": method}, files=files)
    if method.split("/")[0] in ("custom", "evalkit") and capability == "algorithm":
        # `tp plugin lock` refuses this as `tp validate` would; a hand-written lock must still be refused
        with pytest.raises(UsageError, match="does not run algorithm plugins"):
            lock_plugin(lab.root, "exp", "alice/opsd@1.2.0")
        from tuneplane.runtime.digest import tree_digest

        entry = {"id": "alice/opsd", "version": "1.2.0", "digest": tree_digest(lab.root / "plugins/opsd")}
        (lab.root / "experiments/exp/plugins.lock.json").write_text(
            json.dumps({"apiVersion": "tuneplane/plugins-lock/v1", "plugins": [entry]}, indent=2) + "\n",
            encoding="utf-8",
        )
    else:
        lock_plugin(lab.root, "exp", "alice/opsd@1.2.0")
    commit_all(lab.root)
    return load_lab(lab.root)


def test_plugins_come_from_the_lock_and_plugin_yaml(tmp_path: Path) -> None:
    lab = _plugin_lab(tmp_path / "lab", "trl/sft")
    lock = json.loads((lab.root / "experiments/exp/plugins.lock.json").read_text())["plugins"][0]
    (plugin,) = resolve_run(lab, request("exp", inputs=INPUTS)).spec.plugins
    assert plugin.model_dump() == {
        "id": "alice/opsd",
        "name": "opsd",
        "version": "1.2.0",
        "digest": lock["digest"],
        "capability": "algorithm",
        "entrypoint": "opsd_patch:install",
        "load": "deferred",
        "requires_core": ">=0.1,<1",
        "source": "plugins/opsd",
    }


def test_a_plugin_changed_after_locking_is_refused(tmp_path: Path) -> None:
    lab = _plugin_lab(tmp_path / "lab", "trl/sft")
    (lab.root / "plugins/opsd/opsd_patch/__init__.py").write_text("def install(params):\n    raise SystemExit\n")
    error = refusal(lab, request("exp", inputs=INPUTS))
    assert "plugins/opsd changed since it was locked" in error.message


@pytest.mark.parametrize("method", ["custom/custom", "evalkit/benchmark"])
def test_algorithm_plugins_are_refused_for_custom_and_evalkit(tmp_path: Path, method: str) -> None:
    lab = _plugin_lab(tmp_path / "lab", method)
    fields = (
        {"image": CUSTOM_IMAGE, "observability_url": OBS_URL}
        if method == "custom/custom"
        else {"inputs": {"model": "m"}}
    )
    error = refusal(lab, request("exp", **fields))
    assert "alice/opsd@1.2.0 is an algorithm plugin" in error.message
    assert method.split("/")[0] in error.message


# ── the refusals of CONTRACT §7, in the seed wording ────────────────────────────────────────────────


def test_custom_entrypoint_missing(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"c": "custom/custom"})
    (lab.root / "experiments/c/train.sh").rename(lab.root / "experiments/c/run.sh")
    error = refusal(lab, request("c", image=CUSTOM_IMAGE, observability_url=OBS_URL))
    assert error.message == "custom entrypoint is missing or escapes the experiment directory"


def test_custom_entrypoint_escaping_through_a_symlink(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"c": "custom/custom"})
    outside = tmp_path / "outside.sh"
    outside.write_text("echo pwned\n")
    script = lab.root / "experiments/c/train.sh"
    script.unlink()
    os.symlink(outside, script)
    error = refusal(lab, request("c", image=CUSTOM_IMAGE, observability_url=OBS_URL))
    assert error.message == "custom entrypoint is missing or escapes the experiment directory"


def test_custom_external_observability_needs_a_url(lab: Lab) -> None:
    error = refusal(lab, request("custom-exp", observability_url=""))
    assert error.message == "custom external observability requires spec.framework.observability_url"


def test_platform_observability_refuses_a_url(lab: Lab) -> None:
    error = refusal(lab, request("pytorch-exp", observability_url=OBS_URL))
    assert error.message == "pytorch/image-classification uses platform observability: --observability-url is refused"


def test_custom_needs_an_image(lab: Lab) -> None:
    error = refusal(lab, request("custom-exp", image=""))
    assert error.message == "custom/custom needs --image: it has no catalog image"


@pytest.mark.parametrize("operation", ["export", "eval"])
def test_custom_refuses_lifecycle_operations(lab: Lab, operation: str) -> None:
    error = refusal(lab, request("custom-exp", operation=operation, inputs={"checkpoint": "x"}))
    assert error.message.startswith(f"custom adapter refuses {operation}")


def test_required_inputs_are_named(lab: Lab) -> None:
    error = refusal(lab, request("trl-sft-exp", inputs={"validation_data": "v"}))
    assert error.message == "The trl recipe requires explicit: --model --train-data"
    error = refusal(lab, request("verl-grpo-exp", inputs={}))
    assert error.message == "The verl recipe requires explicit: --model --train-data --validation-data"


def test_platform_owned_keys_in_a_verl_config_are_refused(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"v": "verl/grpo"})
    config = lab.root / "experiments/v/config.yaml"
    config.write_text(config.read_text().replace("\ntrainer:\n", "\ntrainer:\n  default_local_dir: /tmp/ckpt\n"))
    error = refusal(lab, request("v", inputs=INPUTS))
    assert error.message == (
        "experiments/v/config.yaml: config.yaml sets trainer.default_local_dir, a key the platform owns for verl/grpo"
    )


def test_trl_output_dir_is_platform_owned(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"t": "trl/sft"})
    config = lab.root / "experiments/t/config.yaml"
    config.write_text(config.read_text() + "\noutput_dir: /tmp/out\n")
    error = refusal(lab, request("t", inputs=INPUTS))
    assert "config.yaml sets output_dir, a key the platform owns for trl/sft" in error.message


def test_lifecycle_needs_a_checkpoint_and_gets_its_gpus(lab: Lab) -> None:
    error = refusal(lab, request("trl-sft-exp", "h200:16", operation="export"))
    assert error.message == "export needs --checkpoint"
    spec = resolve_run(
        lab,
        request(
            "trl-sft-exp",
            "h200:16",
            operation="export",
            inputs={"checkpoint": "runs/alice/trl-sft-exp/r/out/checkpoints/final"},
        ),
    )
    assert (spec.spec.resources.nodes, spec.spec.resources.gpus_per_node) == (1, 1)
    assert spec.spec.inputs.checkpoint == "/mnt/tuneplane/runs/alice/trl-sft-exp/r/out/checkpoints/final"
    escaping = refusal(lab, request("trl-sft-exp", operation="export", inputs={"checkpoint": "../../etc"}))
    assert "may not contain '..'" in escaping.message


def test_recipe_missing_from_the_catalog(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"})
    lock_path = lab.root / "experiments/img/recipe.lock.json"
    lock = json.loads(lock_path.read_text())
    lock["recipe"]["name"] = "pytorch/gone"
    lock_path.write_text(json.dumps(lock))
    error = refusal(lab, request("img"))
    assert "recipe 'pytorch/gone' is not in the catalog" in error.message


# ── preparing once for many requests ────────────────────────────────────────────────────────────────


def test_prepared_experiment_gives_the_same_jobspec(lab: Lab) -> None:
    prepared = prepare_experiment(lab, "trl-sft-exp", catalog())
    req = request("trl-sft-exp", "h200:16")
    again = resolve_prepared(lab, prepared, req, commit=COMMIT, dirty=False, env={})
    assert again == resolve_run(lab, req)
    assert JobSpec.model_validate(again.to_json_dict()) == again  # round-trips through its own schema


def test_a_local_lab_refuses_a_run_that_needs_several_nodes(tmp_path: Path) -> None:
    """The local backend runs a job on this machine: two nodes' worth of GPUs cannot be honoured."""
    from support.render import CLUSTER_SETTINGS, make_lab, request

    from tuneplane.plan.resolve import resolve

    settings = CLUSTER_SETTINGS.replace("  backend: kubernetes\n", "  backend: local\n")
    lab = make_lab(tmp_path / "lab", {"pytorch-exp": "pytorch/image-classification"}, settings=settings)
    with pytest.raises(UsageError, match=r"needs 2 nodes.*cluster.backend: local") as caught:
        resolve(lab, "pytorch-exp", request("pytorch-exp", "h200:16"), commit="0" * 40, dirty=False, env={})
    assert "cluster.backend: kubernetes or slurm" in caught.value.hint  # each backend of a cluster
    one_node = resolve(lab, "pytorch-exp", request("pytorch-exp", "h200:8"), commit="0" * 40, dirty=False, env={})
    assert one_node.spec.resources.local and one_node.spec.resources.nodes == 1


# ── time limits and retry policies: the most specific one wins ──────────────────────────────────────


def test_a_profiles_time_limit_bounds_a_run_whose_request_sets_none(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace("  cpu: {gpus_per_node: 0,", "  cpu: {time_limit: 7200, gpus_per_node: 0,")
    lab = make_lab(tmp_path / "lab", settings=settings)

    assert resolve_run(lab, request("custom-exp", profile="cpu")).spec.timeout_seconds == 7200
    assert resolve_run(lab, request("custom-exp", profile="cpu", timeout=600)).spec.timeout_seconds == 600
    assert resolve_run(lab, request("custom-exp", profile="h200")).spec.timeout_seconds is None


def test_the_retry_policy_is_the_requests_else_the_profiles_else_the_labs(tmp_path: Path) -> None:
    settings = CLUSTER_SETTINGS.replace("  cpu: {gpus_per_node: 0,", "  cpu: {retry: {attempts: 5}, gpus_per_node: 0,")
    settings += "retry: {attempts: 2, on: [Preempted]}\n"
    lab = make_lab(tmp_path / "lab", settings=settings)

    by_lab = resolve_run(lab, request("custom-exp", profile="h200")).spec.retry
    by_profile = resolve_run(lab, request("custom-exp", profile="cpu")).spec.retry
    by_request = resolve_run(lab, request("custom-exp", profile="cpu", retry={"attempts": 1})).spec.retry

    assert (by_lab.attempts, by_lab.on) == (2, ["Preempted"])
    assert (by_profile.attempts, by_profile.on) == (5, ["Preempted", "Evicted", "NodeFailure"])
    assert by_request.attempts == 1


def test_a_run_under_the_default_retry_policy_keeps_its_jobspec_digest_form(lab: Lab) -> None:
    spec = resolve_run(lab, request("custom-exp"))

    assert "retry" not in spec.to_json_dict()["spec"]
