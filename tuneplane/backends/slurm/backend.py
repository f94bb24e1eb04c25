"""`SlurmBackend`: the Backend protocol on a Slurm cluster, through its command-line tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuneplane.backends.base import BackendRef, Observation, SubmitRequest
from tuneplane.backends.rundir import collect_artifacts
from tuneplane.backends.slurm import cancel, logs, observe, submit
from tuneplane.backends.slurm.commands import SlurmCommands
from tuneplane.backends.slurm.submit import RUN_FILE
from tuneplane.constants import TERMINAL
from tuneplane.render.slurm import STATE_DIR


class SlurmBackend:
    name = "slurm"
    requeues = True  # Slurm requeues a job after a node failure: an ended run may start again

    def __init__(self, conf: str = "", timeout: float | None = None) -> None:
        self.commands = SlurmCommands(conf) if timeout is None else SlurmCommands(conf, timeout)
        self._accounting: bool | None = None

    def submit(self, request: SubmitRequest) -> BackendRef:
        return submit.submit(self.commands, request)

    def observe(self, ref: BackendRef) -> Observation:
        if self._accounting is None:
            self._accounting = observe.accounting_enabled(self.commands)
        return observe.observe(self.commands, ref, self._accounting)

    def logs(self, ref: BackendRef, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        return logs.read_log(ref, tail, follow, lambda: self.observe(ref).phase in TERMINAL)

    def cancel(self, ref: BackendRef) -> None:
        cancel.cancel(self.commands, ref)

    def artifacts(self, ref: BackendRef) -> list[dict[str, Any]]:
        """What the recipe's artifact globs match in the run's out dir on the shared filesystem."""
        run_dir = Path(ref.run_dir)
        try:
            meta = json.loads((run_dir / STATE_DIR / RUN_FILE).read_text(encoding="utf-8"))
            globs = [dict(item) for item in meta["artifacts"]]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return collect_artifacts(run_dir / "out", globs)
