"""The HyperPod training operator's side of the agent contract, on loopback: real HyperPod agents
driven on this machine the way the operator drives them in a cluster (the agent tests, the resize
benchmark, `action=rehearse local.agent_python=...`).

Each simulated node ("pod") is one real `hyperpodrun` (hyperpod-elastic-agent, from the image's
virtualenv: scripts/image_venv.py) started with the rendered manifest's own container command, args
and env; only paths (config mount, log dir, the pod's node-local memory volume) and the agent's port
are adapted. A pod's memory volume lives as long as the pod: a removed pod (deleted or its node dead)
takes it along. The operator drives the agents through their HTTP API: `POST /start` (rank, nnodes,
master address and the job's one port, rank IPs, fault count, the progress it read from `/status`), `POST /stop`
(graceful: SIGUSR1 to the workers, or in place the agent's fault notification), `GET /status`,
`POST /shutdown`. A watcher polls every agent's `/status` and keeps each change, so a caller can
tell what any agent ever reported.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from elastic_launcher.errors import LauncherError
from training.contract.config_files import NODE_LOCAL_DIR_ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_ports() -> range:
    """The kernel's range for `bind(0)` and the local end of outgoing connections."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


class MasterPort:
    """The job's one master port, held for the operator's life. It is free between two sizes (no server
    listens while the workers re-form), so it lies outside the ephemeral range, where no `bind(0)` and
    no outgoing connection (the agents' status polls, another job's gloo pairs) can take it meanwhile;
    a lock file per port keeps two operators on this machine from choosing the same one."""

    def __init__(self):
        ephemeral = _ephemeral_ports()
        candidates = range(10000, ephemeral.start) if ephemeral.start > 11000 else range(ephemeral.stop, 65536)
        candidates = candidates or range(10000, 20000)  # the whole range is ephemeral: the lock alone guards it
        locks = Path(tempfile.gettempdir()) / "elastic-launcher-master-ports"
        locks.mkdir(exist_ok=True)
        offset = random.randrange(len(candidates))
        for i in range(len(candidates)):
            port = candidates[(offset + i) % len(candidates)]
            lock = open(locks / f"{port}.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with socket.socket() as s:  # nothing else listens there now
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("", port))
            except OSError:
                lock.close()
                continue
            self.port, self._lock = port, lock
            return
        raise LauncherError(f"no free port in {candidates.start}-{candidates.stop - 1} for the job's master port")

    def release(self) -> None:
        self._lock.close()


@dataclass(frozen=True)
class Container:
    """What the rendered HyperPodPyTorchJob runs in each pod, and its ConfigMap's files."""
    command: list[str]
    args: list[str]
    env: dict[str, str]
    config_files: dict[str, str]
    config_mount: str
    graceful_timeout: int

    @classmethod
    def from_manifest(cls, manifest: Path) -> "Container":
        return cls.from_objects([d for d in yaml.safe_load_all(manifest.read_text()) if d])

    @classmethod
    def from_objects(cls, docs: list[dict]) -> "Container":
        job = next(d for d in docs if d["kind"] == "HyperPodPyTorchJob")
        configmap = next(d for d in docs if d["kind"] == "ConfigMap")
        pod = job["spec"]["replicaSpecs"][0]["template"]["spec"]
        container = pod["containers"][0]
        mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "training-config")
        return cls(container["command"], container["args"], {e["name"]: e["value"] for e in container["env"]},
                   configmap["data"], mount, job["spec"]["elasticPolicy"]["gracefulShutdownTimeoutInSeconds"])


@dataclass
class Pod:
    name: str
    port: int
    proc: subprocess.Popen
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class AgentOperator:
    def __init__(self, container: Container, work: Path, venv_bin: Path, cwd: Path, worker_args: list[str] = ()):
        """Pods run `container` from `venv_bin` in `cwd`, their files under `work`; `worker_args` go
        after the container's own to the training entrypoint (a rehearsal's run directory, its pauses)."""
        self.container, self.work, self.venv_bin, self.cwd = container, work, venv_bin, cwd
        self.worker_args = list(worker_args)
        self.config_dir = work / "config"  # the ConfigMap, "mounted"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        for name, text in container.config_files.items():
            (self.config_dir / name).write_text(text)
        self.pods: list[Pod] = []
        self.fault_count = 0
        # The job's one master port (the operator's status.masterPort), the same at every /start: a
        # worker that stays through a resize re-forms its process group on the port it used before.
        self._master_port = MasterPort()
        self.master_port = self._master_port.port
        self.history: list[tuple[float, str, str]] = []  # (time, pod, status) at every change
        self._last: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    # --- pods ---------------------------------------------------------------------------------------
    def add_pod(self) -> Pod:
        """A new pod, once its agent is ready (in place: once its workers wait at the barrier)."""
        pod = self.spawn_pod()
        self.wait_status([pod], {"ready"}, timeout=90)
        return pod

    def spawn_pod(self) -> Pod:
        """A new pod, its agent starting (not waited for: `status` says when it is ready)."""
        name = f"pod-{len(self.pods)}"
        port, log = free_port(), self.work / f"{name}.log"
        args = [a.replace(f"={self.container.config_mount}", f"={self.config_dir}") for a in self.container.args]
        args = [f"--log-dir={self.work / name / 'logs'}" if a.startswith("--log-dir=") else a for a in args]
        command = [str(self.venv_bin / self.container.command[0]), "--server-host=127.0.0.1",
                   f"--server-port={port}", *args, *self.worker_args]
        env = {**os.environ, **self.container.env, "PATH": f"{self.venv_bin}{os.pathsep}{os.environ['PATH']}",
               "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "VIRTUAL_ENV": str(self.venv_bin.parent)}
        if NODE_LOCAL_DIR_ENV in env:  # the pod's memory-backed emptyDir
            env[NODE_LOCAL_DIR_ENV] = str(self.node_local(name))
        env.pop("PYTHONPATH", None)  # the image's packages only; the working directory holds `training`
        proc = subprocess.Popen(command, cwd=self.cwd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        pod = Pod(name, port, proc, log)
        self.pods.append(pod)
        return pod

    def node_local(self, name: str) -> Path:
        return self.work / name / "node-local"

    def remove(self, pod: Pod, sig: int = signal.SIGTERM) -> None:
        """Kubernetes deleting the pod (SIGTERM to the agent, PID 1) or the node dying (SIGKILL); the
        pod's memory volume goes when its processes have."""
        pod.proc.send_signal(sig)
        threading.Thread(target=lambda: (pod.proc.wait(), shutil.rmtree(self.node_local(pod.name), ignore_errors=True)),
                         daemon=True).start()

    # --- the agent API ------------------------------------------------------------------------------
    def _call(self, pod: Pod, method: str, path: str, body: dict | None = None) -> dict | None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(pod.url(path), data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read()
        return json.loads(text) if text else None

    def status(self, pod: Pod) -> dict:
        """The agent's /status; every answer, from any caller, goes into `history` when it changed."""
        try:
            answer = self._call(pod, "GET", "/status")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            answer = {"status": "gone"}
        with self._lock:
            if self._last.get(pod.name) != answer["status"]:
                self._last[pod.name] = answer["status"]
                self.history.append((time.time(), pod.name, answer["status"]))
        return answer

    def start(self, pods: list[Pod], progress: dict | None = None, apart: float = 0.0) -> float:
        """/start to `pods` in rank order, `apart` seconds between two pods' calls."""
        rank_ips = [{"rank": r, "ip": "127.0.0.1"} for r in range(len(pods))]
        started = time.time()
        for rank, pod in enumerate(pods):
            if rank and apart:
                time.sleep(apart)
            self._call(pod, "POST", "/start", {"rank": rank, "nnodes": len(pods), "faultCount": self.fault_count,
                                               "master_addr": "127.0.0.1", "master_port": self.master_port,
                                               "rankIps": rank_ips, "progress": progress or {}})
        return started

    def stop(self, pods: list[Pod], graceful: bool = True, apart: float = 0.0) -> float:
        started = time.time()
        for i, pod in enumerate(pods):
            if i and apart:
                time.sleep(apart)
            self._call(pod, "POST", "/stop", {"is_graceful": graceful, "timeout": self.container.graceful_timeout})
        return started

    def shutdown(self, pod: Pod) -> None:
        self._call(pod, "POST", "/shutdown")

    def wait_status(self, pods: list[Pod], wanted: set[str], timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.status(p)["status"] in wanted for p in pods):
                return time.time()
            time.sleep(0.05)
        raise TimeoutError(f"{[p.name for p in pods]} not {wanted} within {timeout}s: "
                           f"{[self.status(p) for p in pods]}")

    def progress(self, pods: list[Pod]) -> dict:
        """What the operator hands back in the next /start: the newest progress any agent reports."""
        found = [s["progress"] for s in map(self.status, pods) if s.get("progress")]
        return max(found, key=lambda p: next(iter(p.values()))["progressCount"], default={})

    # --- watching -----------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop_watch.is_set():
            for pod in list(self.pods):
                self.status(pod)
            time.sleep(0.05)

    def close(self) -> None:
        self._stop_watch.set()
        self._watcher.join(5)
        for pod in self.pods:
            if pod.proc.poll() is None:
                os.killpg(pod.proc.pid, signal.SIGKILL)
                pod.proc.wait()
        self._master_port.release()
