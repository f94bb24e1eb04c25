"""tuneplane-launch, run for real: `python -m tuneplane.launcher` in a job package in a temp dir.

The training framework is `tests/fixtures_plugins/faketrain`; the plugins written here patch it the
way algorithm plugins patch a real framework, and the fake trainer reports what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from support.installed import needs
from support.wait import wait_until

from tuneplane import __version__
from tuneplane.constants import CONFIG_ERROR_EXIT
from tuneplane.ingest import mint_token
from tuneplane.launcher import PythonEntry, python_entry, version_admits
from tuneplane.runtime.digest import tree_digest

FIXTURES = Path(__file__).resolve().parent / "fixtures_plugins"

EAGER_SOURCE = """
def install(params):
    import faketrain.algorithms as alg
    original = alg.compute_advantages
    scale = float(params.get("opsd.scale", 1.0))

    def patched(rewards):
        return [a * scale for a in original(rewards)]

    alg.compute_advantages = patched  # no guard of its own: the launcher must not call it twice
    alg.PATCH_CALLS += 1
"""

DEFERRED_SOURCE = """
def install(params, **ctx):
    import faketrain.algorithms as alg
    tokenizer, limit = ctx["tokenizer"], ctx["max_seq_len"]
    mult = int(params.get("budget.mult", 1))
    alg.token_budget = lambda text: min(limit, len(tokenizer.encode(text)) * mult)
    alg.PATCH_CALLS += 1
"""


def make_plugin(
    work: Path,
    name: str,
    source: str,
    *,
    load: str = "eager",
    capability: str = "algorithm",
    requires_core: str = "",
    module: str | None = None,
) -> dict[str, Any]:
    """Write tuneplane_plugins/<name>/ and return its JobSpec entry (digest computed from disk)."""
    module = module or name.replace("-", "_") + "_plugin"
    root = work / "tuneplane_plugins" / name
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text(
        f"schema: tuneplane/plugin/v1\nname: {name}\nversion: 1.2.0\ncapability: {capability}\n"
        f"entrypoint: {module}:install\nload: {load}\n",
        encoding="utf-8",
    )
    (root / f"{module}.py").write_text(source, encoding="utf-8")
    return {
        "id": f"alice/{name}",
        "name": name,
        "version": "1.2.0",
        "digest": tree_digest(root),
        "capability": capability,
        "entrypoint": f"{module}:install",
        "load": load,
        "requires_core": requires_core,
        "scope": "entrypoint",
    }


def write_jobspec(
    work: Path,
    plugins: list[dict[str, Any]],
    argv: list[str],
    *,
    cwd: str = "",
    hyperparams: dict[str, Any] | None = None,
    in_process: bool = False,
) -> None:
    spec = {
        "apiVersion": "tuneplane/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "run-1"},  # a key the launcher does not use: ignored
        "spec": {
            "framework": {"kind": "nemo-rl", "version": "0.4"},
            "hyperparams": hyperparams if hyperparams is not None else {"opsd.scale": 2.0},
            "plugins": plugins,
        },
        "launch": {"argv": argv, "mode": "direct", "cwd": cwd, "in_process": in_process},
    }
    (work / ".tuneplane").mkdir(exist_ok=True)
    (work / ".tuneplane" / "jobspec.json").write_text(json.dumps(spec), encoding="utf-8")


def away_receiver_env(work: Path, secret: bytes, run: str, out: Path) -> tuple[dict[str, str], int]:
    """A single-node rank-zero job reporting to a port nothing listens on yet (the receiver is away, and
    a test may start one there later), retrying fast: the environment and the port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = reporting_env(
        work,
        f"http://127.0.0.1:{port}",
        secret,
        run,
        out,
        TUNEPLANE_REPORT_RETRY_BASE="0.02",
        TUNEPLANE_REPORT_RETRY_CAP="0.1",
    )
    for name in (
        "RANK",
        "LOCAL_RANK",
        "TUNEPLANE_NODE_RANK",
        "TUNEPLANE_COLLECTOR",
        "TUNEPLANE_COLLECTOR_PID",
        "TUNEPLANE_METRICS_NATIVE",
    ):
        env.pop(name, None)
    return env, port


def reporting_env(work: Path, endpoint: str, secret: bytes, run: str, out: Path, **extra: str) -> dict[str, str]:
    """The launcher's environment with reporting on: a job token for `run` at `endpoint`, and `extra`."""
    return dict(
        os.environ,
        TUNEPLANE_WORK_DIR=str(work),
        TUNEPLANE_JOB_ENABLED="1",
        TUNEPLANE_JOB_ENDPOINT=endpoint,
        TUNEPLANE_JOB_RUN_ID=run,
        TUNEPLANE_JOB_TOKEN=mint_token(secret, run),
        TUNEPLANE_OUT_DIR=str(out),
        **extra,
    )


def launch(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        TUNEPLANE_WORK_DIR=str(work),
        PYTHONPATH=os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.run(
        [sys.executable, "-m", "tuneplane.launcher", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def plugin_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("plugin")]


TRAIN = ["python", "-m", "faketrain.main", "--out", "result.json"]


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    return tmp_path


def test_eager_and_deferred_plugins_patch_the_trainer_in_its_own_process(work: Path) -> None:
    eager = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    deferred = make_plugin(work, "budget-patch", DEFERRED_SOURCE, load="deferred")
    write_jobspec(
        work,
        [deferred, eager],
        [*TRAIN, "--deferred", "budget-patch"],
        hyperparams={"opsd.scale": 2.0, "budget.mult": 10},
    )

    proc = launch(work)

    assert proc.returncode == 0, proc.stderr
    assert plugin_lines(proc) == [
        "plugin  : alice/budget-patch@1.2.0 registered in entrypoint process (deferred)",
        "plugin  : alice/opsd-patch@1.2.0 applied in entrypoint process",
    ]
    result = json.loads((work / "result.json").read_text())
    assert result["launcher_loaded"] is True and result["name"] == "__main__"
    assert result["advantages"] == [-2.0, 0.0, 2.0]  # (r - mean) * opsd.scale
    assert result["token_budget"] == 30  # 3 tokens from the ctx tokenizer * budget.mult, under max_seq_len
    assert result["deferred_installed"] == [True]
    assert result["patch_calls"] == 2
    assert result["argv"][1:] == ["--out", "result.json", "--deferred", "budget-patch"]


def test_script_entry_runs_in_process_with_its_arguments(work: Path) -> None:
    make_plugin(work, "opsd-patch", EAGER_SOURCE)
    entry = make_plugin(work, "other", EAGER_SOURCE.replace("opsd.scale", "other.scale"), module="other_mod")
    (work / "train.py").write_text(
        "import json, sys\nimport faketrain.algorithms as alg\n"
        "json.dump({'argv': sys.argv, 'name': __name__, 'adv': alg.compute_advantages([0.0, 4.0])},"
        " open('script.json', 'w'))\n",
        encoding="utf-8",
    )
    write_jobspec(work, [entry], [sys.executable, "train.py", "--lr", "0.1"], hyperparams={"other.scale": 3})

    proc = launch(work)

    assert proc.returncode == 0, proc.stderr
    result = json.loads((work / "script.json").read_text())
    assert result["argv"][1:] == ["--lr", "0.1"] and Path(result["argv"][0]) == (work / "train.py").resolve()
    assert result["name"] == "__main__" and result["adv"] == [-6.0, 6.0]


def test_tampered_plugin_stops_the_job_before_any_patch_or_training(work: Path) -> None:
    good = make_plugin(work, "a-good", EAGER_SOURCE)
    bad = make_plugin(work, "opsd-patch", EAGER_SOURCE, module="opsd_mod")
    (work / "tuneplane_plugins" / "opsd-patch" / "opsd_mod.py").write_text(EAGER_SOURCE + "\n# edited\n")
    write_jobspec(work, [good, bad], TRAIN)

    proc = launch(work)

    assert proc.returncode == CONFIG_ERROR_EXIT == 78
    actual = tree_digest(work / "tuneplane_plugins" / "opsd-patch")
    assert "alice/opsd-patch@1.2.0" in proc.stderr
    assert actual in proc.stderr and bad["digest"] in proc.stderr and actual != bad["digest"]
    assert "tp plugin lock" in proc.stderr
    assert plugin_lines(proc) == []  # the valid plugin was not applied either
    assert not (work / "result.json").exists()


def test_requires_core_mismatch_stops_the_job(work: Path) -> None:
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE, requires_core=">=2.1,<3")
    write_jobspec(work, [plugin], TRAIN)

    proc = launch(work)

    assert proc.returncode == CONFIG_ERROR_EXIT
    assert ">=2.1,<3" in proc.stderr and __version__ in proc.stderr
    assert not (work / "result.json").exists()


def test_requires_core_that_admits_the_running_version_loads(work: Path) -> None:
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE, requires_core=">=0.1,<1")
    write_jobspec(work, [plugin], TRAIN)
    proc = launch(work)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((work / "result.json").read_text())["advantages"] == [-2.0, 0.0, 2.0]


def test_install_that_raises_stops_the_job_with_a_clear_message(work: Path) -> None:
    source = "def install(params):\n    raise ValueError('needs opsd.alpha')\n"
    plugin = make_plugin(work, "opsd-patch", source)
    write_jobspec(work, [plugin], TRAIN)

    proc = launch(work)

    assert proc.returncode == CONFIG_ERROR_EXIT
    last = proc.stderr.strip().splitlines()[-1]
    assert "alice/opsd-patch@1.2.0" in last and "ValueError: needs opsd.alpha" in last
    assert not (work / "result.json").exists()


def test_second_install_in_the_same_process_is_a_no_op(work: Path) -> None:
    eager = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    deferred = make_plugin(work, "budget-patch", DEFERRED_SOURCE, load="deferred")
    write_jobspec(work, [deferred, eager], [*TRAIN, "--reinstall", "--deferred", "budget-patch", "--deferred-twice"])

    proc = launch(work)

    assert proc.returncode == 0, proc.stderr
    result = json.loads((work / "result.json").read_text())
    assert result["reinstalled"] == []
    assert result["advantages"] == [-2.0, 0.0, 2.0]  # scaled once, not twice
    assert result["deferred_installed"] == [True, False]
    assert result["token_budget"] == 3  # the first ctx (max_seq_len=4096) stuck
    assert result["patch_calls"] == 2
    assert len(plugin_lines(proc)) == 2


def test_unknown_deferred_name_lists_what_is_registered(work: Path) -> None:
    deferred = make_plugin(work, "budget-patch", DEFERRED_SOURCE, load="deferred")
    write_jobspec(work, [deferred], [*TRAIN, "--deferred", "alice/budget-patch"])

    proc = launch(work)

    assert proc.returncode != 0
    assert "DeferredPluginError" in proc.stderr
    assert "'alice/budget-patch'" in proc.stderr and "registered: budget-patch" in proc.stderr
    assert not (work / "result.json").exists()


def test_other_capabilities_are_skipped_with_a_log_line(work: Path) -> None:
    env_plugin = {
        "id": "alice/gym",
        "name": "gym",
        "version": "0.3.0",
        "digest": "sha256:" + "0" * 64,
        "capability": "environment",
        "entrypoint": "gym_env:make",
        "load": "eager",
    }
    write_jobspec(work, [env_plugin], TRAIN)

    proc = launch(work)

    assert proc.returncode == 0, proc.stderr
    assert plugin_lines(proc) == [
        "plugin  : alice/gym@0.3.0 skipped (capability environment is not loaded in the entrypoint process)"
    ]
    assert json.loads((work / "result.json").read_text())["advantages"] == [-1.0, 0.0, 1.0]


def test_non_python_argv_is_execd_in_the_launch_cwd(work: Path) -> None:
    (work / "sub").mkdir()
    write_jobspec(work, [], ["sh", "-c", 'pwd > where.txt; echo "$0 $1" >> where.txt', "a", "b"], cwd="sub")

    proc = launch(work)

    assert proc.returncode == 0, proc.stderr
    lines = (work / "sub" / "where.txt").read_text().splitlines()
    assert Path(lines[0]).resolve() == (work / "sub").resolve() and lines[1] == "a b"


def test_python_entry_without_plugins_is_execd_fresh(work: Path) -> None:
    write_jobspec(work, [], [sys.executable, "-m", "faketrain.main", "--out", "result.json"])
    proc = launch(work)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((work / "result.json").read_text())["launcher_loaded"] is False


def test_missing_command_exits_127(work: Path) -> None:
    write_jobspec(work, [], ["no-such-command-tp-test"])
    proc = launch(work)
    assert proc.returncode == 127 and "no-such-command-tp-test" in proc.stderr


def test_algorithm_plugins_with_a_non_python_argv_are_refused(work: Path) -> None:
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    write_jobspec(work, [plugin], ["bash", "train.sh"])

    proc = launch(work)

    assert proc.returncode == CONFIG_ERROR_EXIT
    assert "not a Python entry" in proc.stderr and "python -m tuneplane.launcher" in proc.stderr


def test_ranks_that_re_enter_the_launcher_install_the_plugins(work: Path) -> None:
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    rank = f"exec {shlex.quote(sys.executable)} -m tuneplane.launcher -m faketrain.main --out result.json"
    write_jobspec(work, [plugin], ["sh", "-c", rank])

    proc = launch(work)

    assert proc.returncode == 0, proc.stderr
    assert "1 plugin(s) verified" in proc.stdout
    assert plugin_lines(proc) == ["plugin  : alice/opsd-patch@1.2.0 applied in entrypoint process"]
    assert json.loads((work / "result.json").read_text())["advantages"] == [-2.0, 0.0, 2.0]


def test_ranks_whose_command_is_missing_exit_127_with_the_name(work: Path) -> None:
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    write_jobspec(work, [plugin], ["no-such-torchrun-tp-test", "-m", "tuneplane.launcher", "-m", "faketrain.main"])
    proc = launch(work)
    assert proc.returncode == 127, proc.stderr
    assert "cannot start 'no-such-torchrun-tp-test': command not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_re_entry_still_verifies_before_starting_ranks(work: Path) -> None:
    plugin = make_plugin(work, "opsd-patch", EAGER_SOURCE)
    plugin["digest"] = "sha256:" + "1" * 64
    write_jobspec(work, [plugin], ["sh", "-c", "python -m tuneplane.launcher -m faketrain.main --out r.json"])
    proc = launch(work)
    assert proc.returncode == CONFIG_ERROR_EXIT and "sha256:" + "1" * 64 in proc.stderr


def test_plugin_module_already_imported_from_elsewhere_is_refused(work: Path) -> None:
    first = make_plugin(work, "one", EAGER_SOURCE, module="patch")
    second = make_plugin(work, "two", EAGER_SOURCE, module="patch")
    write_jobspec(work, [first, second], TRAIN)

    proc = launch(work)

    assert proc.returncode == CONFIG_ERROR_EXIT
    assert "alice/two@1.2.0" in proc.stderr and "'patch' is already imported" in proc.stderr


@pytest.mark.parametrize(
    "jobspec, needle",
    [
        (None, "no JobSpec"),
        ("{not json", "cannot read the JobSpec"),
        pytest.param("[" * 5000 + "]" * 5000, "cannot read the JobSpec", id="nested-past-the-parsers-depth"),
        pytest.param('{"apiVersion": ' + "9" * 5000 + "}", "cannot read the JobSpec", id="integer-past-python-digits"),
        (json.dumps({"apiVersion": "tuneplane/v2", "kind": "TrainingJob"}), "not a tuneplane/v1 TrainingJob"),
        (
            json.dumps(
                {
                    "apiVersion": "tuneplane/v1",
                    "kind": "TrainingJob",
                    "spec": {"plugins": {}},
                    "launch": {"argv": ["true"]},
                }
            ),
            "spec.plugins must be a list",
        ),
        (
            json.dumps({"apiVersion": "tuneplane/v1", "kind": "TrainingJob", "spec": {}, "launch": {"argv": []}}),
            "launch.argv",
        ),
    ],
)
def test_bad_jobspec_is_a_configuration_error(work: Path, jobspec: str | None, needle: str) -> None:
    if jobspec is not None:
        (work / ".tuneplane").mkdir()
        (work / ".tuneplane" / "jobspec.json").write_text(jobspec)
    proc = launch(work)
    assert proc.returncode == CONFIG_ERROR_EXIT and needle in proc.stderr and "Traceback" not in proc.stderr


# ── pure helpers ──────────────────────────────────────────────────────────────────────────────────

SPECS = [
    ">=0.1,<1",
    ">=2.1,<3",
    "==0.5.*",
    "!=0.5.*",
    "~=0.5",
    "~=0.5.1",
    "~=0.4.9",
    "<0.5",
    "<=0.5",
    ">0.5",
    "==0.5",
    "==0.5.0+local",
    "!=0.5.0",
    "<0.5rc2",
    ">0.5.0.post1",
    "==0.5.0rc1",
    "",
    " >= 0.4 ",
]
VERSIONS = [
    "0.5.0",
    "0.5",
    "0.5.0rc1",
    "0.5.0.dev0",
    "0.5.0.post1",
    "0.5.1",
    "1.0",
    "0.4.99",
    "0.5.0+abc",
    "0.5.0a1.dev2",
    "0.6rc1",
    "1!0.2",
]


@pytest.mark.parametrize("spec", SPECS)
def test_stdlib_specifier_check_agrees_with_packaging(spec: str) -> None:
    for version in VERSIONS:
        expected = SpecifierSet(spec).contains(version, prereleases=True)
        assert version_admits(spec, version) is expected, (spec, version)


@pytest.mark.parametrize("spec", ["=>1", "~=1", ">=1,,<2", "==1.*.2"])
def test_malformed_specifier_raises(spec: str) -> None:
    with pytest.raises(ValueError):
        version_admits(spec, "1.0")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "-m", "pkg.mod", "--x", "1"], PythonEntry("module", "pkg.mod", ["--x", "1"])),
        (
            ["python3", "-u", "train.py", "-m", "y"],
            PythonEntry("file", "train.py", ["-m", "y"], unbuffered=True),
        ),
        ([sys.executable, "-c", "print(1)", "a"], PythonEntry("code", "print(1)", ["a"])),
        (["python", "-O", "train.py"], None),
        (["python2", "train.py"], None),
        (["/usr/bin/elsewhere/python", "train.py"], None),
        (["torchrun", "--standalone", "train.py"], None),
        (["bash", "train.sh"], None),
        (["python"], None),
    ],
)
def test_python_entry_recognition(argv: list[str], expected: PythonEntry | None) -> None:
    assert python_entry(argv) == expected


def test_the_collectors_last_pass_finishes_before_the_launcher_exits(work: Path, tmp_path: Path) -> None:
    """In a pod the launcher is the container's first process: when it exits, everything left in the
    container is killed. A trainer that writes its last metrics and exits must still have them
    collected, so the launcher waits for the collector's last pass instead of exec'ing."""
    import signal

    from tuneplane.ingest import series
    from tuneplane.ingest.server import IngestServer

    secret, run = b"l" * 32, "run-launch"
    out = tmp_path / "out"
    out.mkdir()
    lines = "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\\n" for s in range(50))
    write_jobspec(work, [], ["sh", "-c", f"sleep 0.5; printf '{lines}' > {out}/m.jsonl; exit 3"])
    server = IngestServer(tmp_path / "ingest.sqlite", secret).start()
    try:
        env = reporting_env(
            work,
            server.url,
            secret,
            run,
            out,
            TUNEPLANE_REPORT_FLUSH_INTERVAL="0.02",
            TUNEPLANE_METRICS_NATIVE=json.dumps([{"format": "jsonl", "path": "m.jsonl"}]),
        )
        log = tmp_path / "launcher.log"
        with log.open("wb") as sink:  # a file, not a pipe: waiting must not wait for the collector too
            proc = subprocess.Popen(
                [sys.executable, "-m", "tuneplane.launcher"],
                cwd=work,
                env=env,
                start_new_session=True,
                stdout=sink,
                stderr=sink,
            )
            proc.wait(timeout=120)
        err = log.read_text()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the container goes away with its first process
        except ProcessLookupError:
            pass
        assert proc.returncode == 3, err  # the trainer's own exit code
        assert [s for s, _ in series(server.store.path, run, "loss")] == list(range(50))
    finally:
        server.stop()


RANK_PROBE = """
import json, os, sys, time
rank = int(os.environ["RANK"])
out = os.environ["TUNEPLANE_OUT_DIR"]
if rank == 0:
    with open(os.path.join(out, "m.jsonl"), "w") as fh:
        for step in range(40):
            fh.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\\n")
time.sleep(1.0)  # long enough for a collector started under this rank to show in /proc
mine = []  # collectors started by this rank's launcher (this process: the entry runs in it)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\\0")
    except (OSError, ValueError, IndexError):
        continue
    if ppid == os.getpid() and b"tuneplane.collector" in argv:
        mine.append(int(pid))
with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
    json.dump(mine, fh)
"""


@pytest.mark.process
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc to find the collectors")
def test_under_torchrun_only_the_launcher_beside_torchrun_collects(work: Path, tmp_path: Path) -> None:
    """torchrun's ranks re-enter the launcher with RANK set; rank 0's must not start a second
    collector beside the first (it would wait for the out dir's lock and hold the rank's exit)."""
    needs("torch.distributed.run")
    from tuneplane.ingest import series
    from tuneplane.ingest.server import IngestServer

    secret, run = b"r" * 32, "run-ranks"
    out = tmp_path / "out"
    out.mkdir()
    (work / "probe.py").write_text(RANK_PROBE)
    write_jobspec(
        work,
        [],
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc_per_node",
            "2",
            "-m",
            "tuneplane.launcher",
            str(work / "probe.py"),
        ],
    )
    server = IngestServer(tmp_path / "ingest.sqlite", secret).start()
    try:
        env = reporting_env(
            work,
            server.url,
            secret,
            run,
            out,
            TUNEPLANE_REPORT_FLUSH_INTERVAL="0.02",
            TUNEPLANE_METRICS_NATIVE=json.dumps([{"format": "jsonl", "path": "m.jsonl"}]),
            OMP_NUM_THREADS="1",
        )
        for name in ("RANK", "LOCAL_RANK", "TUNEPLANE_NODE_RANK", "TUNEPLANE_COLLECTOR"):
            env.pop(name, None)
        proc = subprocess.run(
            [sys.executable, "-m", "tuneplane.launcher"], cwd=work, env=env, capture_output=True, text=True, timeout=180
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)] == [[], []]
        assert [s for s, _ in series(server.store.path, run, "loss")] == list(range(40))  # each once
    finally:
        server.stop()


UNSENT_TRAINER = """
import os, sys, time
from tuneplane import report

report.init(monitor_hardware=False)
for step in range(200):
    report.log({"loss": 1.0 / (step + 1)}, step=step)
report.finish(timeout=0.3)  # the receiver is away: what is left stays in the out dir
out = os.environ["TUNEPLANE_OUT_DIR"]
open(os.path.join(out, "finished"), "w").close()
for _ in range(600):  # the test brings the receiver back, then lets the job end
    if os.path.exists(os.path.join(out, "go")):
        break
    time.sleep(0.05)
"""


@pytest.mark.parametrize("through", ["shell", "python"])
def test_what_finish_left_in_the_out_dir_is_uploaded_when_the_job_ends(
    work: Path, tmp_path: Path, through: str
) -> None:
    """On a cluster no backend runs after the job: the launcher (on node rank zero) uploads the
    points the SDK's `finish()` could not deliver before it exits, so none is lost to a receiver
    that was away for a while. A shell entry (custom's train.sh) and a Python one alike."""
    from tuneplane.ingest import series
    from tuneplane.ingest.server import IngestServer

    secret, run = b"u" * 32, "run-unsent"
    out = tmp_path / "out"
    out.mkdir()
    (work / "trainer.py").write_text(UNSENT_TRAINER)
    argv = (
        ["sh", "-c", f"exec {shlex.quote(sys.executable)} {shlex.quote(str(work / 'trainer.py'))}"]
        if through == "shell"
        else [sys.executable, str(work / "trainer.py")]
    )
    write_jobspec(work, [], argv)
    env, port = away_receiver_env(work, secret, run, out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuneplane.launcher"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = None
    try:
        wait_until(  # a job that ended without the mark is told by its output below
            lambda: (out / "finished").exists() or proc.poll() is not None,
            60,
            message="the job neither called finish() nor ended",
        )
        assert (out / "finished").exists(), proc.communicate(timeout=30)[0]
        assert list((out / ".tuneplane").glob("report-unsent-*.jsonl"))
        server = IngestServer(tmp_path / "ingest.sqlite", secret, port=port).start()
        (out / "go").touch()
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
        assert [s for s, _ in series(server.store.path, run, "loss")] == list(range(200)), output
        assert not list((out / ".tuneplane").glob("report-unsent-*"))  # delivered, so removed
    finally:
        proc.kill()
        if server is not None:
            server.stop()


ATTEMPT = """
import sys, tuneplane.report as r
r.init(monitor_hardware=False)
for step in range(10):
    r.log({"loss": float(sys.argv[1])}, step=step)
r.finish(timeout=float(sys.argv[2]))
"""


def test_an_earlier_attempts_leftovers_are_uploaded_before_the_trainer_starts(work: Path, tmp_path: Path) -> None:
    """A job restarted in the same out dir logs the steps after its checkpoint again. What the first
    attempt could not deliver was uploaded only after the second attempt, so its older values replaced
    the second attempt's at the same steps; the launcher now uploads it before the trainer starts."""

    from tuneplane.ingest import series
    from tuneplane.ingest.server import IngestServer

    secret, run = b"a" * 32, "run-attempts"
    out = tmp_path / "out"
    out.mkdir()
    (work / "attempt.py").write_text(ATTEMPT)
    env, port = away_receiver_env(work, secret, run, out)
    first = subprocess.run(
        [sys.executable, str(work / "attempt.py"), "1", "0.2"], env=env, capture_output=True, text=True, timeout=60
    )  # the receiver is away: all ten stay in the out dir
    assert "10 point(s) not delivered" in first.stderr, first.stderr
    write_jobspec(work, [], [sys.executable, str(work / "attempt.py"), "2", "10"])
    server = IngestServer(tmp_path / "ingest.sqlite", secret, port=port).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tuneplane.launcher"], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    assert series(server.store.path, run, "loss") == [(step, 2.0) for step in range(10)]
    assert not list((out / ".tuneplane").glob("report-unsent-*"))
