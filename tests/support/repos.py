"""Real git for lifecycle tests: a bare remote, clones with a fixed identity, labs seeded with runs.

Everything runs the `git` binary in temporary folders; nothing is mocked. `seed_lab` builds a lab
through the library (init, one or more custom experiments, run requests), commits and pushes it, so a
test starts from the state a merged pull request leaves behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

IDENTITY = {"user.name": "Lifecycle Test", "user.email": "lifecycle@example.org"}
BRANCH = "main"
REPO_URL = "https://git.example.org/team/lab.git"

# A train.sh that records each start in a shared file (so tests count launches) and succeeds.
COUNTING_TRAIN = """#!/usr/bin/env bash
set -euo pipefail
: "${TUNEPLANE_OUT_DIR:?}"
echo "$TUNEPLANE_RUN_ID" >> "${LAUNCH_COUNTER:-/dev/null}"
mkdir -p "$TUNEPLANE_OUT_DIR/checkpoints"
echo ok > "$TUNEPLANE_OUT_DIR/checkpoints/step-1.txt"
echo "trained $TUNEPLANE_RUN_ID"
"""


def git(root: Path, *args: str, check: bool = True, strip: bool = True, env: Mapping[str, str] | None = None) -> str:
    """`git ARGS` in `root`, the one way the tests run git; its standard output.

    Of the environment's `GIT_*` variables only the identity (`GIT_AUTHOR_*`, `GIT_COMMITTER_*`) and
    `GIT_CONFIG_NOSYSTEM` reach git, so a variable of the shell that started the tests (`GIT_DIR` in
    a hook) cannot point it at another repository; `env` is laid over that (a fixed identity for a
    fixture made before the per-test one is set). With `check` a failure is an AssertionError carrying
    git's stderr; `strip=False` keeps the output whole where its spaces are the point (`status --porcelain`).
    """
    done = git_result(root, *args, env=env)
    if check and done.returncode:
        raise AssertionError(f"git {' '.join(args)} in {root} failed ({done.returncode}): {done.stderr}")
    return done.stdout.strip() if strip else done.stdout


def git_result(
    root: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in `root` in `git`'s environment, its whole result and unchecked: for a test of what git
    itself does (a hook refusing a commit), whose exit status and stderr are what it asserts."""
    child_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_")
        or k.startswith("GIT_AUTHOR")
        or k.startswith("GIT_COMMITTER")
        or k == "GIT_CONFIG_NOSYSTEM"
    }
    child_env.update(env or {})
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, env=child_env, check=False, timeout=timeout
    )


def make_remote(base: Path, name: str = "remote.git") -> Path:
    remote = base / name
    remote.mkdir(parents=True)
    git(remote, "init", "-q", "--bare", "-b", BRANCH)
    return remote


def configure(root: Path) -> None:
    for key, value in IDENTITY.items():
        git(root, "config", key, value)


def clone(remote: Path, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", "-b", BRANCH, str(remote), dest.name)
    configure(dest)
    return dest


def seed_lab(
    remote: Path,
    work: Path,
    experiments: Mapping[str, str] | None = None,
    *,
    backend: str = "local",
    runs: Iterable[tuple[str, str]] = (),
    profile: str = "local",
) -> Path:
    """A lab with custom experiments (name → train.sh), pushed to `remote` with `runs` requested."""
    from support.labs import new_lab  # support.labs commits with this module's git
    from tuneplane.author.scaffold import new_experiment
    from tuneplane.lab.load import load_lab

    new_lab(work, "race-lab")
    configure(work)
    git(work, "remote", "add", "origin", str(remote))
    set_backend(work, backend)
    lab = load_lab(work)
    for name, script in (experiments or {"demo": COUNTING_TRAIN}).items():
        new_experiment(lab, name, "custom/custom", None)
        (work / "experiments" / name / "train.sh").write_text(script, encoding="utf-8")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "experiments")
    add_requests(work, runs, profile=profile)
    git(work, "push", "-q", "origin", f"HEAD:{BRANCH}")
    return work


def set_backend(root: Path, backend: str) -> None:
    path = root / "tuneplane.yaml"
    text = path.read_text(encoding="utf-8")
    text = text.replace("  backend: local ", f"  backend: {backend} ")
    text = text.replace('    url: ""  ', f'    url: "{REPO_URL}"  ')
    path.write_text(text, encoding="utf-8")


def request(experiment: str, run_id: str, profile: str = "local", **fields: object):  # type: ignore[no-untyped-def]
    from tuneplane.models.run import RunRequest

    values: dict[str, object] = {"image": "python:3.12", "observability_url": "https://track.example.org/p"}
    values.update(fields)
    return RunRequest(experiment=experiment, run_id=run_id, profile=profile, **values)  # type: ignore[arg-type]


def add_requests(root: Path, runs: Iterable[tuple[str, str]], profile: str = "local", commit: bool = True) -> list[str]:
    """Write run requests (experiment, run id) and commit them together; returns their paths."""
    from tuneplane.lab.runs import write_request

    paths = [write_request(root, request(exp, run_id, profile)).relative_to(root).as_posix() for exp, run_id in runs]
    if paths and commit:
        git(root, "add", "--", *paths)
        git(root, "commit", "-q", "-m", f"request {len(paths)} runs")
    return paths


def run_ids(count: int, day: str = "20250102") -> list[str]:
    """Distinct, time-ordered run ids."""
    return [f"{day}-{100000 + i:06d}-{i:06x}" for i in range(count)]


def kube_lab(tmp_path: Path, count: int = 1) -> tuple[Path, list[str]]:
    """A lab on the Kubernetes backend with `count` requests of experiment `demo`, and the bot's clone."""
    remote = make_remote(tmp_path)
    ids = run_ids(count)
    seed_lab(
        remote,
        tmp_path / "seed",
        {"demo": "echo hi\n"},
        backend="kubernetes",
        runs=[("demo", r) for r in ids],
        profile="h200:8",
    )
    return clone(remote, tmp_path / "bot"), ids


def kubeconfig(path: Path, server: str, token: str = "fake-token") -> Path:
    """A kubeconfig naming the fake API server (token auth, plain HTTP on loopback); the default token is an
    administrator's, a ServiceAccount's (`FakeKube.service_account_token`) is held to its roles."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {server}
contexts:
- name: fake
  context: {{cluster: fake, user: bot, namespace: tuneplane}}
current-context: fake
users:
- name: bot
  user: {{token: {token}}}
""",
        encoding="utf-8",
    )
    return path


def tp_process(root: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -m tuneplane ARGS` started in `root` (not waited for)."""
    child_env = dict(os.environ)
    child_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "tuneplane", *args],
        cwd=root,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def tp_run(root: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> tuple[int, str]:
    proc = tp_process(root, *args, env=env)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def tp_here(root: Path, *args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """`tp_run` through the command line in this process: (exit code, stdout + stderr). For tests of what
    a command decides; a test of the process itself (a crash, a kill, a race, a hang under a timeout)
    starts one with `tp_run` or `tp_process`."""
    from conftest import run_tp_in_process

    done = run_tp_in_process(*args, cwd=root, env=env)
    return done.code, done.output


def bot_pass(root: Path, verb: str, *args: str) -> str:
    """`tp bot VERB --push ARGS` in `root`, in this process (`tp_here`), its exit checked; its output."""
    code, out = tp_here(root, "bot", verb, "--push", *args)
    assert code == 0, out
    return out


def remote_files(remote: Path, prefix: str) -> list[str]:
    out = git(remote, "ls-tree", "-r", "--name-only", BRANCH, "--", prefix)
    return [line for line in out.splitlines() if line]


def remote_show(remote: Path, path: str) -> str:
    return git(remote, "show", f"{BRANCH}:{path}")


def backend_factory(  # type: ignore[no-untyped-def]
    fake_kube: object, attempts: int = 2, storage: Path | None = None, timeout: float = 15.0
):
    """The bot's backends for in-process tests: the cluster is the fake API server, reached as the bot's
    ServiceAccount held to the Role tuneplane declares (twin_rbac), with fast retries.

    The fake server answers from a thread of the test's own process: on a loaded machine one answer can
    take a second, so the request timeout is generous unless a test is about timeouts and says so."""
    from twin_rbac import bot_client

    from tuneplane.backends.kubernetes.backend import ApiRetry, KubernetesBackend
    from tuneplane.backends.local import LocalBackend

    def make(name: str):  # type: ignore[no-untyped-def]
        if name == "local":
            return LocalBackend(storage or Path(os.environ["TUNEPLANE_STORAGE_ROOT"]))
        retry = ApiRetry(attempts=attempts, backoff_base=0.001, backoff_cap=0.005, timeout=timeout)
        return KubernetesBackend(
            "tuneplane",
            api_client=bot_client(fake_kube, "tuneplane"),  # type: ignore[arg-type]
            retry=retry,
            sleep=lambda _s: None,
        )

    return make


def quiet(_line: str) -> None:
    """An `echo` that drops the bot's progress lines."""


def broken_links(root: Path) -> list[tuple[str, str]]:
    """Every relative link of every committed dashboard page that names no file of the committed tree."""
    files = set(git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines())
    bad = []
    for page in sorted(f for f in files if f.startswith("status/") and f.endswith(".md")):
        for target in re.findall(r"\]\(([^)\s]+)\)", git(root, "show", f"HEAD:{page}")):
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#")[0]))
            if path not in files:
                bad.append((page, target))
    return bad


def copy_work_tree(root: Path, target: Path) -> None:
    """What a clone of `root` holds, with the working tree's edits: the files git lists as tracked or as
    untracked and not ignored. A copy of the whole folder also takes the caches (.pytest_cache holds the
    framework venvs other tests build) and races with other workers' transient files there (pytest's
    `pytest-cache-files-*`, renamed away while a copy reads it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    for rel in listed.split(b"\0"):
        if not rel or rel.endswith(b"/"):  # the end, or a nested repository git lists as a folder
            continue
        source, copy = root / os.fsdecode(rel), target / os.fsdecode(rel)
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(source, copy)
        except FileNotFoundError:
            continue  # deleted in the working tree, or a transient file gone since the listing
