"""This machine's GPUs and the lock files that share them between local runs."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from tuneplane.backends.local.files import GPUS_ENV, try_lock
from tuneplane.runtime.records import Record, field

# ── GPUs ─────────────────────────────────────────────────────────────────────────────────────────


def local_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """This machine's GPU ids: $TUNEPLANE_LOCAL_GPUS, else $CUDA_VISIBLE_DEVICES, else nvidia-smi."""
    env = os.environ if env is None else env
    text = str(env.get(GPUS_ENV, "")).strip()
    if text:
        return (
            [str(i) for i in range(int(text))]
            if text.isdigit() and "," not in text
            else [p.strip() for p in text.split(",") if p.strip()]
        )
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [p.strip() for p in str(visible).split(",") if p.strip() and p.strip() != "-1"]
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


class Unschedulable(Exception):
    """The run asks for more GPUs than this machine has."""


class GpuLease(Record):
    ids: list[str] = field(default_factory=list)
    handles: list[IO[str]] = field(default_factory=list)

    def release(self) -> None:
        for fh in self.handles:
            fh.close()
        self.handles.clear()


def allot(count: int, lock_dir: Path, stop: Callable[[], bool], waiting: Callable[[str], None]) -> GpuLease | None:
    """Lock `count` free GPUs (one lock file per device, shared by every local run on this machine)."""
    if count <= 0:
        return GpuLease()
    devices = local_gpus()
    if count > len(devices):
        raise Unschedulable(
            f"the run needs {count} GPU(s); this machine has {len(devices)} ({GPUS_ENV}={','.join(devices) or 'none'})"
        )
    lock_dir.mkdir(parents=True, exist_ok=True)
    told = False
    while not stop():
        lease = GpuLease()
        for device in devices:
            fh = try_lock(lock_dir / f"gpu-{device}.lock")
            if fh is not None:
                lease.ids.append(device)
                lease.handles.append(fh)
                if len(lease.ids) == count:
                    return lease
        lease.release()
        if not told:
            waiting(f"waiting for {count} free GPU(s) of {len(devices)}: other local runs hold them")
            told = True
        time.sleep(0.5)
    return None
