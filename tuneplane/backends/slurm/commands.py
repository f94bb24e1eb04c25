"""Running Slurm's commands: the one place that starts `sbatch`, `squeue`, `scontrol`, `sacct`, `scancel`
(and `bash -n` on a rendered batch script).

Each call gets a bounded time, a small fixed environment (the bot's own variables, its git and CI
tokens among them, never reach a job) and `SLURM_CONF` when the lab names one. A controller that does
not answer becomes `SlurmUnavailable`, which callers treat as "try again later", never as a verdict.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from tuneplane.backends.base import BackendError
from tuneplane.errors import UsageError
from tuneplane.runtime.records import FrozenRecord

TIMEOUT = 60.0  # seconds for one command; Slurm retries its own connections within MessageTimeout
PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SLURM_CONF")
# What Slurm's commands print when the controller cannot be reached (its own retries exhausted).
UNREACHABLE = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "connection timed out",
    "zero bytes were transmitted or received",
    "slurm_persist_conn_open_without_init",
    "communication connection failure",
)


class SlurmUnavailable(BackendError):
    """slurmctld did not answer: nothing was decided; ask again later."""


class Result(FrozenRecord):
    code: int
    out: str
    err: str


class SlurmCommands(FrozenRecord):
    conf: str = ""  # path to slurm.conf; empty: Slurm's own default (or $SLURM_CONF)
    timeout: float = TIMEOUT

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        source = os.environ if base is None else base
        env = {key: source[key] for key in PASSED_ENV if key in source}
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, *args: str, input_text: str | None = None) -> Result:
        program = args[0]
        if shutil.which(program) is None:
            raise BackendError(
                f"{program} is not installed on this machine: the Slurm backend needs "
                "Slurm's client commands (apt-get install slurm-client, or your site's module)"
            )
        try:
            done = subprocess.run(
                list(args),
                input=input_text,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=self.env(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(
                f"{program} did not answer within {self.timeout:.0f}s: slurmctld is not responding; will retry"
            ) from None
        except OSError as exc:
            raise BackendError(f"cannot run {program}: {exc}") from None
        result = Result(done.returncode, done.stdout, done.stderr.strip())
        if result.code and unreachable(result.err):
            raise SlurmUnavailable(f"{program}: {first_line(result.err)}; will retry")
        return result

    def checked(self, *args: str) -> str:
        result = self.run(*args)
        if result.code:
            raise BackendError(f"{' '.join(args[:2])} failed ({result.code}): {first_line(result.err)}")
        return result.out


def check_script(script: str) -> str:
    """`bash -n`: the rendered batch script parses (a failure is our bug, never the user's); returns it."""
    try:
        done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(
            f"cannot check the batch script with bash -n: {exc}",
            hint="install bash on the machine that renders Slurm runs",
        ) from None
    if done.returncode:
        raise UsageError(
            f"the rendered batch script does not parse: {done.stderr.strip()}",
            hint="this is a bug in tuneplane; report it with the run request",
        )
    return script


def unreachable(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in UNREACHABLE)


def first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no message)"


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol show … --oneliner` output: `Key=Value Key=Value …` (values without spaces)."""
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields
