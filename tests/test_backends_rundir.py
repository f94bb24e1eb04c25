"""What the local and Slurm backends share through `backends.rundir`: the artifact scan, the run lock and
reading a log with --tail and --follow. Each backend is also checked end to end in its own tests."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from tuneplane.backends.base import BackendRef
from tuneplane.backends.local import LOG, LocalBackend
from tuneplane.backends.rundir import collect_artifacts, follow_log, last_exception, locked, read_tail
from tuneplane.backends.slurm.logs import log_path, read_log


def test_artifacts_stay_inside_the_out_dir(tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "elsewhere"
    (out / "checkpoints" / "step-20").mkdir(parents=True)
    (out / "checkpoints" / "step-20" / "model.bin").write_bytes(b"x" * 10)
    (out / "checkpoints" / "step-20" / "leak.bin").symlink_to(tmp_path / "secret.bin")
    (tmp_path / "secret.bin").write_bytes(b"y" * 1000)
    outside.mkdir()
    (out / "checkpoints" / "step-30").symlink_to(outside, target_is_directory=True)
    (out / "artifacts.json").write_text("{}")
    globs = [
        {"kind": "checkpoint", "pattern": "checkpoints/step-*"},
        {"kind": "log", "pattern": "*.json"},
        {"kind": "checkpoint", "pattern": "checkpoints/*", "format": "hf"},
    ]

    found = collect_artifacts(out, globs)

    assert found == [
        {"kind": "checkpoint", "path": "checkpoints/step-20", "format": "directory", "size_bytes": 10, "step": 20}
    ]


def test_the_run_lock_is_exclusive_while_held(tmp_path: Path) -> None:
    lock = tmp_path / "submit.lock"
    with locked(lock), open(lock, "a+") as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock, "a+") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the block


@pytest.mark.parametrize(
    "tail, expected",
    [(None, ["a", "b", "c"]), (0, ["a", "b", "c"]), (2, ["b", "c"]), (5, ["a", "b", "c"]), (-1, ["a", "b", "c"])],
)
def test_tail_means_the_same_to_both_backends(tmp_path: Path, tail: int | None, expected: list[str]) -> None:
    slurm_ref = BackendRef("slurm", "SlurmJob", "job", run_dir=str(tmp_path / "slurm"), uid="41")
    log_path(slurm_ref).parent.mkdir(parents=True)
    log_path(slurm_ref).write_text("a\nb\nc\n")
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    (local_dir / LOG).write_text("a\nb\nc\n")
    local_ref = BackendRef("local", "Process", "run", run_dir=str(local_dir))

    assert list(read_log(slurm_ref, tail, False, lambda: True)) == expected
    assert list(LocalBackend(tmp_path).logs(local_ref, tail=tail)) == expected


def test_follow_reads_what_is_appended_until_the_run_ends(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("first\n")
    ended = threading.Event()
    seen: list[str] = []

    def writer() -> None:
        with open(log, "a") as fh:
            for text in ("second\n", "half ", "a line\n", "last, no newline"):
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        ended.set()

    give_up = time.monotonic() + 20  # bounds the test should the follow not see the end
    lines = follow_log(log, None, True, lambda: ended.is_set() or time.monotonic() > give_up, poll=0.01)
    seen.append(next(lines))
    thread = threading.Thread(target=writer)
    thread.start()
    seen += list(lines)
    thread.join(5)

    assert seen == ["first", "second", "half a line", "last, no newline"]


@pytest.mark.parametrize("tail", [None, 2])
def test_follow_keeps_a_line_the_job_is_still_writing_whole(tmp_path: Path, tail: int | None) -> None:
    log = tmp_path / "run.log"
    log.write_text("first\nhalf ")  # the job is between the two writes of one line
    ended = threading.Event()
    lines = follow_log(log, tail, True, ended.is_set, poll=0.01)
    assert next(lines) == "first"
    with open(log, "a") as fh:
        fh.write("a line\n")
    ended.set()
    assert list(lines) == ["half a line"]


def test_follow_waits_for_a_log_and_ends_with_the_run(tmp_path: Path) -> None:
    log = tmp_path / "never-written.log"
    calls: list[int] = []

    def finished() -> bool:
        calls.append(1)
        return len(calls) > 3

    assert list(follow_log(log, None, True, finished, poll=0.01)) == []
    assert len(calls) == 4


ACCELERATE = """\
step 1
Traceback (most recent call last):
  File "/work/train.py", line 3, in <module>
    open("data.jsonl")
FileNotFoundError: [Errno 2] No such file or directory: 'data.jsonl'
Traceback (most recent call last):
  File "/venv/bin/accelerate", line 8, in <module>
    sys.exit(main())
    ^^^^^^^^^^^^^^^^
subprocess.CalledProcessError: Command '['/venv/bin/python', '-m', 'train']' returned non-zero exit status 1.
"""
TORCHRUN = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/train.py", line 9, in <module>
[rank0]:     loss.backward()
[rank0]: RuntimeError: CUDA error: out of memory
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED
"""
CHAINED = """\
Traceback (most recent call last):
  File "t.py", line 2, in <module>
KeyError: 'lr'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "t.py", line 4, in <module>
ValueError: the config has no learning rate
"""


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (ACCELERATE, "FileNotFoundError: [Errno 2] No such file or directory: 'data.jsonl'"),
        (TORCHRUN, "RuntimeError: CUDA error: out of memory"),
        (CHAINED, "ValueError: the config has no learning rate"),
        (
            ACCELERATE.split("Traceback", 2)[0] + "Traceback" + ACCELERATE.split("Traceback", 2)[2],
            "subprocess.CalledProcessError: Command '['/venv/bin/python', '-m', 'train']' returned non-zero exit "
            "status 1.",
        ),
        ("step 1\nstep 2\nkilled\n", ""),
    ],
    ids=["accelerate", "torchrun-ranks", "chained", "only-the-wrapper", "no-traceback"],
)
def test_the_last_exception_is_the_trainers_not_its_launchers(log: str, expected: str) -> None:
    assert last_exception(log.splitlines()) == expected


def test_a_long_log_is_read_from_its_tail(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text("x" * 5000 + "\n" + "\n".join(f"line {i}" for i in range(1000)) + "\n")

    lines = read_tail(path, limit=200)

    assert lines[-1] == "line 999" and all(line.startswith("line ") for line in lines)
    assert read_tail(tmp_path / "missing.log") == []
