"""Run a rendered pod on this machine: its init containers, then its main container, as real processes.

The pod comes from the cluster twin (its controllers made it from the rendered template), so what runs
is what a kubelet would run: each container's `command` + `args`, in its `workingDir`, with the env the
manifest declares, resolved as the kubelet resolves it (`value`, `secretKeyRef` from the twin's
Secrets, `fieldRef` to the pod's own metadata). What a node provides is mapped onto this machine:

- the storage volume's mount path → a temporary directory (in every env value, argument and path);
- cluster host names (a JobSet's first pod, the ingest Service, the Ray head Service) → 127.0.0.1 with
  the port of a server the test started (`hosts`), as `hostAliases` would;
- images: the container runs with this machine's tools (`sh`, `git`, this Python with tuneplane), or
  with the tools a test put in `image_path` for it.

Each container's output becomes its log in the twin, and its exit code ends the pod there
(`Cluster.exit_pod`), so the backend observes the run exactly as it would on a cluster.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twin_controllers import Cluster

_FIELD = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


@dataclass
class PodRunner:
    cluster: Cluster
    storage: Path  # where the storage volume lives on this machine
    hosts: dict[str, str] = field(default_factory=dict)  # text in the pod → text here (host:port, URLs)
    timeout: float = 240.0
    path: list[str] = field(default_factory=list)  # extra PATH entries (this Python's bin first)
    # The image's PATH, when a test stands in for an image's tools: only these directories (an image
    # with `python3` but no `python`, say); None: this machine's tools
    image_path: list[str] | None = None

    # ---- env -------------------------------------------------------------------------------
    def env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        out = {
            "PATH": os.pathsep.join(
                self.image_path
                if self.image_path is not None
                else [*self.path, str(Path(sys.executable).parent), os.environ["PATH"]]
            ),
            "HOME": str(self.storage / ".home" / pod["metadata"]["name"]),
            "LANG": "C.UTF-8",
            "HOSTNAME": pod["metadata"]["name"],
        }
        declared: dict[str, str] = {}
        for entry in container.get("env") or []:
            value = self._value(ns, pod, entry)
            if value is not None:
                if "value" in entry:  # the kubelet expands `$(VAR)` of earlier entries, and `$$` to `$`
                    value = kubelet_expand(value, declared)
                declared[entry["name"]] = value
                out[entry["name"]] = self.map(value)
        Path(out["HOME"]).mkdir(parents=True, exist_ok=True)
        return out

    def _value(self, ns: str, pod: dict[str, Any], entry: dict[str, Any]) -> str | None:
        if "value" in entry:
            return str(entry["value"])
        source = entry.get("valueFrom") or {}
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = self.cluster.kube.get("Secret", ns, ref["name"]) or {}
            data = (secret.get("data") or {}).get(ref["key"])
            if data is None:
                if ref.get("optional"):
                    return None
                raise AssertionError(
                    f"the kubelet would not start this pod: no key {ref['key']} in Secret {ns}/{ref['name']}"
                )
            return base64.b64decode(data).decode()
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            match = _FIELD.match(path)
            if match:
                return str((pod["metadata"].get(match.group(1)) or {}).get(match.group(2), ""))
            if path in ("metadata.name", "metadata.namespace"):
                return str(pod["metadata"][path.split(".")[1]])
            if path == "status.podIP":
                return "127.0.0.1"
            raise AssertionError(f"fieldRef {path} is not modelled by the pod runner")
        raise AssertionError(f"env source {sorted(source)} is not modelled by the pod runner")

    def map(self, text: str) -> str:
        """Node and cluster names → this machine (longest first, so a URL wins over its host)."""
        for mount in self._mounts:
            text = text.replace(mount, str(self.storage))
        for there in sorted(self.hosts, key=len, reverse=True):
            text = text.replace(there, self.hosts[there])
        return text

    _mounts: tuple[str, ...] = ()

    # ---- running ---------------------------------------------------------------------------
    def run_init(self, pod: dict[str, Any]) -> bool:
        """The init containers in order; False (and the pod failed in the twin) when one fails."""
        self._mounts = _storage_mounts(pod)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for container in pod["spec"].get("initContainers") or []:
            done = subprocess.run(
                self._argv(container, pod),
                env=self.env(pod, container),
                cwd=self._cwd(container),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=self.timeout,
                check=False,
            )
            self.cluster.kube.logs[(ns, name, container["name"])] = done.stdout
            if done.returncode != 0:
                self._init_failed(pod, container["name"], done.returncode)
                return False
        self.cluster.start_pod(ns, name)
        return True

    def start(self, pod: dict[str, Any], container: dict[str, Any] | None = None) -> subprocess.Popen[str]:
        self._mounts = _storage_mounts(pod)
        main = container or pod["spec"]["containers"][0]
        return subprocess.Popen(
            self._argv(main, pod),
            env=self.env(pod, main),
            cwd=self._cwd(main),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def run(self, pods: list[dict[str, Any]]) -> dict[str, int]:
        """Run every pod (init, then main; the mains concurrently, as on several nodes); pod → exit code."""
        ready = [p for p in pods if self.run_init(p)]
        procs = {p["metadata"]["name"]: (p, self.start(p)) for p in ready}
        outputs: dict[str, str] = {}
        readers = [
            threading.Thread(target=_drain, args=(proc, outputs, name), daemon=True)
            for name, (_, proc) in procs.items()
        ]
        for reader in readers:
            reader.start()
        codes: dict[str, int] = {}
        for name, (_, proc) in procs.items():
            try:
                codes[name] = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                codes[name] = proc.wait(timeout=10)
        for reader in readers:
            reader.join(timeout=10)
        for name, (pod, _) in procs.items():
            self.cluster.exit_pod(pod["metadata"]["namespace"], name, codes[name], outputs.get(name, ""))
        return codes

    def _argv(self, container: dict[str, Any], pod: dict[str, Any] | None = None) -> list[str]:
        argv = [*container.get("command", []), *container.get("args", [])]
        if not argv:
            raise AssertionError(f"container {container['name']} has no command: the image's entrypoint would run")
        env = self._declared(pod, container) if pod is not None else {}
        return [self.map(kubelet_expand(a, env)) for a in argv]

    def _declared(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        """The container's own env, for expanding `$(VAR)` in its command and args (before host mapping)."""
        out: dict[str, str] = {}
        for entry in container.get("env") or []:
            value = self._value(pod["metadata"]["namespace"], pod, entry)
            if value is not None:
                out[entry["name"]] = kubelet_expand(value, out) if "value" in entry else value
        return out

    def _cwd(self, container: dict[str, Any]) -> str | None:
        work = container.get("workingDir")
        if not work:
            return str(self.storage)
        path = Path(self.map(work))
        path.mkdir(parents=True, exist_ok=True)  # the kubelet creates a missing workingDir
        return str(path)

    def _init_failed(self, pod: dict[str, Any], container: str, code: int) -> None:
        kube = self.cluster.kube
        with kube.changed:
            live = kube.objects[("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])]
            status = live["status"]
            for cs in status.get("initContainerStatuses") or []:
                if cs["name"] == container:
                    cs["state"] = {
                        "terminated": {"exitCode": code, "reason": "Error", "finishedAt": self.cluster.stamp()}
                    }
            status["phase"] = "Failed"
            live["metadata"]["resourceVersion"] = str(next(kube._rv))
            kube.settle()
            kube.changed.notify_all()


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet does to an env value, a command and args: `$$` → `$`, `$(VAR)` → VAR's value when
    VAR is declared (else left as written); any other `$` stays."""
    return _REFERENCE.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def _storage_mounts(pod: dict[str, Any]) -> tuple[str, ...]:
    claims = {v["name"] for v in pod["spec"].get("volumes") or [] if "persistentVolumeClaim" in v}
    mounts = {
        m["mountPath"]
        for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
        for m in c.get("volumeMounts") or []
        if m["name"] in claims
    }
    return tuple(sorted(mounts, key=len, reverse=True))


def _drain(proc: subprocess.Popen[str], outputs: dict[str, str], name: str) -> None:
    assert proc.stdout is not None
    outputs[name] = proc.stdout.read()
