"""Submitting a run to Slurm exactly once, however many bots try and wherever one of them dies.

Under an exclusive lock on a file in the run's directory (shared filesystem; released by the kernel
when its holder dies):
1. a job id recorded for this run (by an earlier submit, or by the job itself when it started) is
   adopted;
2. else a job Slurm still knows under the run's deterministic name whose comment carries the run id
   is adopted (a bot killed between `sbatch` and writing the id);
3. else the lab is staged at the run's commit into the work dir, the token written to a file only
   the job's user can read, and the script submitted with `sbatch --parsable`; the id is recorded at
   once.

The work dir is staged by the bot rather than cloned by the job: compute nodes see the shared
filesystem the bot writes to but often cannot reach the git host, and no git credential has to
reach a job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from tuneplane.backends.base import BackendError, BackendRef, SubmitRequest
from tuneplane.backends.rundir import locked
from tuneplane.backends.slurm.batch import SlurmBatch, batch_of
from tuneplane.backends.slurm.commands import SlurmCommands, first_line, parse_fields
from tuneplane.backends.slurm.errors import SlurmRefused, refusal
from tuneplane.errors import UsageError
from tuneplane.lab.fs import atomic_write, publish_dir
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.render.slurm import LAUNCH_DOCUMENT, STATE_DIR, TOKEN_FILE

KIND = "SlurmJob"
SCRIPT_NAME = "batch.sh"
JOB_ID_FILE = "job-id"
RUN_FILE = "run.json"  # what observing needs later: the run id and its artifact globs
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


def submit(commands: SlurmCommands, request: SubmitRequest) -> BackendRef:
    batch = batch_of(request.run_id, request.payload)
    run_dir = Path(batch.run_dir)
    state = run_dir / STATE_DIR
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendError(
            f"cannot create the run directory {run_dir}: {exc} (cluster.slurm.runs_root must be writable by the bot)"
        ) from None
    with locked(state / "submit.lock"):
        job_id = recorded_job_id(state) or _known_job(commands, batch)
        if not job_id:
            check_fits(commands, batch)
            _stage(run_dir, batch, request)
            job_id = _sbatch(commands, run_dir, batch)
        _record(state, job_id)
    return ref_for(batch, job_id)


def ref_for(batch: SlurmBatch, job_id: str) -> BackendRef:
    return BackendRef(
        backend="slurm",
        kind=KIND,
        name=batch.job_name,
        run_dir=batch.run_dir,
        uid=job_id,
        commit=batch.commit,
        jobspec_digest=batch.jobspec_digest,
    )


def recorded_job_id(state: Path) -> str:
    """The job id written by a submit, else by a job that started (`<id>.<attempt>.started`), else ''."""
    try:
        text = (state / JOB_ID_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    if _JOB_ID.match(text):
        return text
    started = sorted((p.name.split(".", 1)[0] for p in state.glob("*.*.started")), key=_numeric)
    return started[-1] if started and _JOB_ID.match(started[-1]) else ""


def _numeric(job_id: str) -> int:
    return int(job_id.split("_")[0]) if job_id.split("_")[0].isdigit() else -1


def _known_job(commands: SlurmCommands, batch: SlurmBatch) -> str:
    """A job Slurm still holds under this run's name and comment (any state), or ''."""
    result = commands.run("squeue", "--noheader", "--states=all", f"--name={batch.job_name}", "--format=%i|%k")
    if result.code:
        raise BackendError(f"squeue failed ({result.code}): {first_line(result.err)}")
    ids = []
    for line in result.out.splitlines():
        job_id, _, comment = line.strip().partition("|")
        if comment.strip() == batch.comment and _JOB_ID.match(job_id):
            ids.append(job_id)
    return max(ids, key=_numeric) if ids else ""


def _stage(run_dir: Path, batch: SlurmBatch, request: SubmitRequest) -> None:
    """The lab at the run's commit in the work dir, the launch document, the script, the token file."""
    work = Path(batch.work_dir)
    if not (work / LAUNCH_DOCUMENT).is_file():
        tmp = run_dir / ".work.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        _export_lab(batch.lab_root, batch.commit, tmp)
        for name in batch.plugins:
            source = tmp / "plugins" / name
            if source.is_dir():
                shutil.copytree(source, tmp / "tuneplane_plugins" / name, symlinks=True)
        (tmp / ".tuneplane").mkdir(parents=True, exist_ok=True)
        _write(tmp / LAUNCH_DOCUMENT, json.dumps(batch.launch_document, sort_keys=True, indent=1) + "\n")
        if work.exists():
            shutil.rmtree(work)
        publish_dir(tmp, work)
    for sub in ("logs", "out"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    _write(run_dir / STATE_DIR / SCRIPT_NAME, batch.script)
    _write(
        run_dir / STATE_DIR / RUN_FILE,
        json.dumps({"run_id": request.run_id, "artifacts": batch.artifacts}, indent=1) + "\n",
    )
    for key, value in request.secret_data.items():
        if key == "job-token":
            _write_secret(run_dir / TOKEN_FILE, value)


def _export_lab(lab_root: str, commit: str, dest: Path) -> None:
    if not commit:
        raise BackendError("the run has no commit to stage: commit the lab first")
    if not lab_root:  # a rendered batch, never packed for submission (`backends.factory.pack_request`)
        raise BackendError("the run names no lab to stage its commit from: pack it for submission first")
    try:
        GitRepo(Path(lab_root)).archive(commit, dest, exclude=("runs", "status"))
    except UsageError as exc:
        raise BackendError(f"cannot stage commit {commit[:12]} of {lab_root}: {exc.message}") from None


def _write(path: Path, text: str) -> None:
    atomic_write(path, text)


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    atomic_write(path, value, mode=0o600)


def _sbatch(commands: SlurmCommands, run_dir: Path, batch: SlurmBatch) -> str:
    result = commands.run("sbatch", "--parsable", str(run_dir / STATE_DIR / SCRIPT_NAME))
    if result.code:
        raise refusal(result.err, batch.sources)
    job_id = result.out.strip().splitlines()[-1].split(";")[0].strip() if result.out.strip() else ""
    if not _JOB_ID.match(job_id):
        raise BackendError(f"sbatch printed no job id: {result.out.strip()!r}")
    return job_id


def directives(script: str) -> dict[str, str]:
    """The script's `#SBATCH --option=value` lines (the first block of comments), option → value."""
    found: dict[str, str] = {}
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            option, _, value = line[len("#SBATCH ") :].strip().partition("=")
            found.setdefault(option, value)
    return found


def check_fits(commands: SlurmCommands, batch: SlurmBatch) -> None:
    """Refuse a job that can never start: more nodes than its partition has (sbatch accepts it, and it
    would wait in the queue forever)."""
    asked = directives(batch.script)
    nodes = int(asked["--nodes"]) if asked.get("--nodes", "").isdigit() else 1
    partition = asked.get("--partition", "")
    result = commands.run("scontrol", "show", "partition", "--oneliner", *([partition] if partition else []))
    if result.code:
        return  # sbatch names a partition that does not exist itself
    for line in result.out.splitlines():
        fields = parse_fields(line)
        if fields.get("PartitionName") != partition and not (not partition and fields.get("Default") == "YES"):
            continue
        total = fields.get("TotalNodes", "")
        if total.isdigit() and nodes > int(total):
            setting = batch.sources.get("--nodes", "")
            where = f"{setting}: " if setting else ""
            fix = (
                f"ask for at most {total} node(s) (fewer GPUs, or a profile with more GPUs per node), or "
                "choose a bigger partition"
            )
            raise SlurmRefused(
                f"{where}the run asks for {nodes} nodes but partition "
                f"{fields.get('PartitionName')} has {total}: it could never start\n  hint: {fix}",
                setting,
                fix,
            )
        return


def _record(state: Path, job_id: str) -> None:
    _write(state / JOB_ID_FILE, job_id + "\n")
