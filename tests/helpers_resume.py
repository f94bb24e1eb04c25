"""A job interrupted and started again, as a cluster does it: the real launcher, a real receiver.

`Job` runs `python -m tuneplane.launcher` in a work dir holding `.tuneplane/jobspec.json`, with the
contract's environment (work, run and out dirs, node rank 0, the attempt number, a job token for a
`tp ingest serve` started here), and can stop an attempt with SIGTERM once the trainer has written a
complete checkpoint past a given step, the way a preemption or a time limit does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers_ingest import ServeProcess

from tuneplane.ingest import mint_token, series
from tuneplane.report.checkpoints import CHECKPOINTS_DIR, complete_checkpoints

SECRET = b"resume-test-secret-0123456789abcdef"
RUN = "resume-run"


class Receiver(ServeProcess):
    """`tp ingest serve` for the resumed run's metrics."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, SECRET)

    def steps(self, key: str) -> list[int]:
        return [step for step, _ in series(self.db, RUN, key)]


class Job:
    """One run's work dir and run dir; each `start()` is a new attempt on the same out dir."""

    def __init__(self, tmp: Path, argv: list[str], receiver: Receiver, **env: str) -> None:
        self.work, self.run_dir = tmp / "work", tmp / "run"
        self.out = self.run_dir / "out"
        self.work.mkdir(parents=True)
        self.receiver = receiver
        self.extra_env = env
        spec = {
            "apiVersion": "tuneplane/v1",
            "kind": "TrainingJob",
            "spec": {"hyperparams": {}, "plugins": []},
            "launch": {"argv": argv, "mode": "direct", "cwd": "", "in_process": False},
        }
        (self.work / ".tuneplane").mkdir()
        (self.work / ".tuneplane" / "jobspec.json").write_text(json.dumps(spec), encoding="utf-8")

    def env(self, attempt: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
        env.update(
            {
                "TUNEPLANE_WORK_DIR": str(self.work),
                "TUNEPLANE_RUN_DIR": str(self.run_dir),
                "TUNEPLANE_OUT_DIR": str(self.out),
                "TUNEPLANE_NODE_RANK": "0",
                "TUNEPLANE_ATTEMPT": str(attempt),
                "TUNEPLANE_JOB_ENABLED": "1",
                "TUNEPLANE_JOB_ENDPOINT": self.receiver.url,
                "TUNEPLANE_JOB_RUN_ID": RUN,
                "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
                "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.05",
                "TUNEPLANE_REPORT_RETRY_BASE": "0.05",
                "TUNEPLANE_REPORT_RETRY_CAP": "0.2",
                "PYTHONDONTWRITEBYTECODE": "1",
                "OMP_NUM_THREADS": "1",
                **self.extra_env,
            }
        )
        return env

    def newest_step(self) -> int:
        """The step of the newest complete checkpoint (0 when there is none)."""
        return max((step for step, _ in complete_checkpoints(self.out / CHECKPOINTS_DIR)), default=0)

    def run(self, attempt: int, stop_past: int | None = None, timeout: float = 300) -> tuple[int, str]:
        """Attempt `attempt` to its end, or SIGTERM once a complete checkpoint past `stop_past` exists:
        (exit code, everything it printed)."""
        log_path = self.run_dir.parent / f"attempt-{attempt}.log"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tuneplane.launcher"],
                cwd=self.work,
                env=self.env(attempt),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + timeout
                while proc.poll() is None and time.monotonic() < deadline:
                    if stop_past is not None and self.newest_step() > stop_past:
                        proc.send_signal(signal.SIGTERM)  # the launcher passes it on to the trainer
                        break
                    time.sleep(0.01)
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return code, log_path.read_text(errors="replace")

    def interrupted(self, attempt: int) -> tuple[str, int]:
        """An attempt stopped by SIGTERM after it wrote a checkpoint newer than the one it resumed from:
        (its output, the step of the newest complete checkpoint it left)."""
        before = self.newest_step()
        code, output = self.run(attempt, stop_past=before)
        stopped = code == 128 + signal.SIGTERM
        assert stopped, f"attempt {attempt} was not stopped mid-training ({code}):\n{output[-3000:]}"
        after = self.newest_step()
        assert after > before, output[-3000:]
        return output, after
