"""Runs on this machine: `action=local` trains a recipe with torchrun (gloo on CPU); `action=rehearse`
drives it through a capacity trace (elastic_launcher.rehearse). One local "node" is
`local.nproc_per_node` processes; the trainer is told the node count through ELASTIC_NUM_NODES."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from elastic_launcher.dry_run import write_job
from elastic_launcher.errors import LauncherError
from training.config import NUM_NODES_ENV



@dataclass(frozen=True)
class LocalJob:
    config_dir: Path
    run_dir: Path
    nproc_per_node: int

    def command(self, nodes: int, stop_at_step: int | None = None) -> list[str]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nodes * self.nproc_per_node}", "-m", "training",
               f"--config-dir={self.config_dir}", f"--run-dir={self.run_dir}"]
        return cmd + ([f"--stop-at-step={stop_at_step}"] if stop_at_step else [])

    def env(self, nodes: int) -> dict[str, str]:
        tmp = self.run_dir / "tmp"  # torchrun leaves a directory per launch in TMPDIR
        tmp.mkdir(parents=True, exist_ok=True)
        return {**os.environ, NUM_NODES_ENV: str(nodes), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"), "PYTHONUNBUFFERED": "1",
                "TMPDIR": str(tmp)}

    def start(self, nodes: int, stop_at_step: int | None = None, log=None) -> subprocess.Popen:
        """torchrun in its own session, so a resize can signal the whole job at once."""
        return subprocess.Popen(self.command(nodes, stop_at_step), env=self.env(nodes), stdout=log,
                                stderr=subprocess.STDOUT if log else None, start_new_session=True)


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (torchrun's workers), read from /proc."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return sorted(children)


def run_dir_of(job) -> Path:
    return Path(job.settings.local.run_dir or job.plan.sizes[0].config.run.output_dir).resolve()


def prepare(job, plan=None) -> LocalJob:
    """Render the per-size configs (as a dry run does) and pick the run directory."""
    run_dir = run_dir_of(job)
    if not job.settings.local.resume and (run_dir / "checkpoints").exists():
        raise LauncherError(f"{run_dir}/checkpoints exists and local.resume=false: remove it or pick "
                            f"local.run_dir=<new dir>")
    out = write_job(job, plan)
    return LocalJob((out / "configs").resolve(), run_dir, job.settings.local.nproc_per_node)


def run(job) -> int:
    if job.settings.action == "rehearse":
        from elastic_launcher import rehearse

        return rehearse.run(job)
    nodes = job.settings.local.nodes or job.plan.sizes[0].config.trainer.num_nodes
    if job.plan.size(nodes) is None:
        allowed = ", ".join(str(s.nodes) for s in job.plan.sizes)
        raise LauncherError(f"local.nodes={nodes} is not a size this recipe allows ({allowed}): pick one of them")
    local = prepare(job)
    print(f"training {job.plan.job_name} on {nodes} local node(s) x {local.nproc_per_node} process(es); "
          f"run dir {local.run_dir}", flush=True)
    proc = local.start(nodes)
    try:
        return proc.wait(timeout=job.settings.local.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        raise LauncherError(f"local run exceeded local.timeout={job.settings.local.timeout:g}s and was killed") from None
    except KeyboardInterrupt:
        os.killpg(proc.pid, 15)  # SIGTERM: the trainer checkpoints and exits
        proc.wait()
        return 130
