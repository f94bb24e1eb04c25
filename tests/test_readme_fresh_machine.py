"""The README's "A lab in … commands" on a fresh machine: no git identity, no global git config, no
TUNEPLANE_* setting, an empty HOME; only `tp` (this interpreter's) and git on PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readmes_lab_block_runs_on_a_fresh_machine(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## A lab in \w+ commands\n\n```bash\n(.*?)```", text, flags=re.S)
    assert block is not None
    home = tmp_path / "home"
    home.mkdir()
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env |= {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]),
        "GIT_CONFIG_NOSYSTEM": "1",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }
    script = "set -euo pipefail\n" + block.group(1)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Succeeded" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr
