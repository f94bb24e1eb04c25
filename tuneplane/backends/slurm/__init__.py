"""The Slurm backend: batch scripts submitted with `sbatch`, observed with `scontrol`/`sacct` and markers.

Modules: `script` renders the batch script (pure), `commands` runs Slurm's tools, `submit`, `observe`,
`logs` and `cancel` do one thing each, `backend` puts them behind the Backend protocol.
"""

from tuneplane.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]
