#!/usr/bin/env python3
"""On-policy self-distillation for this experiment (the nemo-rl/opsd recipe).

The platform runs this file as the driver of a Ray job, with the arguments NeMo-RL's distillation
driver takes:

    python run.py --config <exp>/config.yaml cluster.num_nodes=N ... <path>=<value> ...

The teacher is the student's own starting model (`teacher.model_name: ${policy.model_name}` in
config.yaml). When the experiment locks an algorithm plugin named `opsd` (load: deferred), it is
installed here, before NeMo-RL builds anything, with the job's parameters: that is where a team's
privileged-context teacher (the teacher also sees the reference solution) plugs in. Then NeMo-RL's
own examples/run_distillation.py runs, from the NeMo-RL installation of the image.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

DRIVER = Path("examples") / "run_distillation.py"


def nemo_rl_root() -> Path:
    """The NeMo-RL checkout of the image: $NEMO_RL_ROOT, else the folder above the package."""
    if os.environ.get("NEMO_RL_ROOT"):
        return Path(os.environ["NEMO_RL_ROOT"])
    import nemo_rl

    return Path(nemo_rl.__file__).resolve().parents[1]


def install_opsd_plugin() -> bool:
    """Install the locked `opsd` algorithm plugin, if the job has one; False when none is registered."""
    try:
        from tuneplane.plugins import install_deferred, registered
    except ImportError:
        return False
    if "opsd" not in registered():
        return False
    install_deferred("opsd", config_argv=list(sys.argv[1:]))
    return True


def main() -> int:
    applied = install_opsd_plugin()
    driver = nemo_rl_root() / DRIVER
    if not driver.is_file():
        raise SystemExit(f"{driver} is missing: no NeMo-RL distillation driver there (set NEMO_RL_ROOT)")
    print(
        f"opsd    : {'plugin opsd applied' if applied else 'plain self-distillation (no opsd plugin locked)'}",
        flush=True,
    )
    sys.argv = [str(driver), *sys.argv[1:]]
    runpy.run_path(str(driver), run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
