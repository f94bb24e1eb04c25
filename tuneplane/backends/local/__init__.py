"""The local backend: a run as a supervised process group on this machine, same contract as a cluster.

`backend` is the Backend (submit, observe, logs, cancel); `supervisor` runs one job to its end;
`observe` reads what a run directory says of its run from this machine's view, `attempts` each attempt;
`files` holds the run directory's names, state file and locks; `gpus` shares this machine's GPUs
between runs; `artifacts` writes what a run left in its out dir (the scan, `collect_artifacts`, is
`backends.rundir`'s, shared with Slurm). `python -m tuneplane.backends.local
supervise RUN_DIR` is the detached supervisor.
"""

from tuneplane.backends.local.backend import LocalBackend, LocalRun
from tuneplane.backends.local.files import CANCEL, DB, LOG, STATE, read_state, supervisor_alive
from tuneplane.backends.local.gpus import local_gpus
from tuneplane.backends.local.supervisor import supervise
from tuneplane.backends.rundir import collect_artifacts

__all__ = [
    "CANCEL",
    "DB",
    "LOG",
    "STATE",
    "LocalBackend",
    "LocalRun",
    "collect_artifacts",
    "local_gpus",
    "read_state",
    "supervise",
    "supervisor_alive",
]
