"""Hardware sampling for rank zero: CPU, memory and (with NVML) GPUs, every monitor interval.

One sampler per job: only rank zero starts one, and a process that inherits a live sampler's pid in
`TUNEPLANE_REPORT_MONITOR_PID` (a child started by the training script) does not start another.
psutil and NVML are used when importable; otherwise /proc. Samples go through the session's queue
under `hw/...` keys with the sample number as the step. `stop()` never waits for a slow sample.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from tuneplane.report._sender import block_sigterm

if TYPE_CHECKING:
    from tuneplane.report._core import Session

OWNER_ENV = "TUNEPLANE_REPORT_MONITOR_PID"


class Monitor:
    """A daemon thread that samples and appends to the session until stopped."""

    def __init__(self, session: Session, sample: Callable[[], dict[str, float]]) -> None:
        self.session = session
        self.sample = sample
        self.interval = session.config.monitor_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tuneplane-report-monitor", daemon=True)
        self.samples = 0

    @classmethod
    def start_for(cls, session: Session) -> Monitor | None:
        if not _claim():
            return None
        monitor = cls(session, Sampler().sample)
        monitor._thread.start()
        return monitor

    def _run(self) -> None:
        block_sigterm()
        while not self._stop.wait(self.interval):
            try:
                values = self.sample()
            except Exception as exc:  # a sensor failure is not a training failure
                self.session.say(f"hardware sampling stopped: {type(exc).__name__}: {exc}")
                return
            if self._stop.is_set():
                return
            if values:
                self.samples += 1
                self.session.append(self.samples, {f"hw/{k}": v for k, v in values.items()})

    def stop(self) -> None:
        """Signal and return at once: finish() must not wait on NVML or a slow /proc read."""
        self._stop.set()
        if os.environ.get(OWNER_ENV) == str(os.getpid()):
            os.environ.pop(OWNER_ENV, None)


def _claim() -> bool:
    owner = os.environ.get(OWNER_ENV, "")
    if owner and owner != str(os.getpid()) and _alive(owner):
        return False
    os.environ[OWNER_ENV] = str(os.getpid())
    return True


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


class Sampler:
    """Reads the machine: psutil/NVML when present, /proc otherwise."""

    def __init__(self) -> None:
        self._psutil = _optional("psutil")
        self._nvml = _nvml()
        self._cpu_last: tuple[int, int] | None = _proc_cpu() if self._psutil is None else None
        if self._psutil is not None:
            self._psutil.cpu_percent(None)

    def sample(self) -> dict[str, float]:
        values = self._cpu_and_memory()
        if self._nvml is not None:
            values.update(_gpu_values(self._nvml))
        return values

    def _cpu_and_memory(self) -> dict[str, float]:
        if self._psutil is not None:
            mem = self._psutil.virtual_memory()
            rss = self._psutil.Process().memory_info().rss
            return {
                "cpu.util_pct": float(self._psutil.cpu_percent(None)),
                "mem.used_pct": float(mem.percent),
                "mem.proc_rss_mb": rss / 2**20,
            }
        values: dict[str, float] = {}
        now = _proc_cpu()
        if now and self._cpu_last:
            busy, total = now[0] - self._cpu_last[0], now[1] - self._cpu_last[1]
            if total > 0:
                values["cpu.util_pct"] = 100.0 * busy / total
        self._cpu_last = now
        values.update(_proc_memory())
        return values


def _optional(name: str) -> ModuleType | None:
    try:
        return __import__(name)
    except Exception:  # any import failure means "not available"
        return None


def _nvml() -> ModuleType | None:
    nvml = _optional("pynvml")
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # no driver, no GPUs
        return None
    return nvml


def _gpu_values(nvml: ModuleType) -> dict[str, float]:
    values: dict[str, float] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        values[f"gpu.{index}.util_pct"] = float(util.gpu)
        values[f"gpu.{index}.mem_used_mb"] = mem.used / 2**20
        values[f"gpu.{index}.mem_used_pct"] = 100.0 * mem.used / mem.total if mem.total else 0.0
    return values


def _proc_cpu() -> tuple[int, int] | None:
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields)
    return total - idle, total


def _proc_memory() -> dict[str, float]:
    values: dict[str, float] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            info = {line.split(":")[0]: int(line.split()[1]) for line in handle if line.count(" ") >= 1}
        total, available = info.get("MemTotal", 0), info.get("MemAvailable", 0)
        if total:
            values["mem.used_pct"] = 100.0 * (total - available) / total
        with open("/proc/self/statm", encoding="ascii") as handle:
            rss_pages = int(handle.read().split()[1])
        values["mem.proc_rss_mb"] = rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return values
