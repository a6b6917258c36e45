"""A rehearsal under real HyperPod agents (`action=rehearse local.agent_python=<python>`): one
`hyperpodrun` per node, started with the rendered job's own container command and env, driven
through the agents' HTTP API the way the operator drives them (elastic_launcher.local.hyperpod_agents):
a resize is `/stop` to every pod of the job, then the pods a scale-down gives back are deleted
(SIGTERM), a scale-up adds pods (new nodes: with `elastic_policy.in_place` their workers start at
once and wait at the agent's barrier), and `/start` hands every pod its new rank with the progress
the agents reported. With `in_place` the workers of staying pods keep their process through the
resize; the report says, resize by resize, whether they did.

The capacity decisions, the trace and the report are the torchrun rehearsal's
(elastic_launcher.local.rehearse); only the job's side differs.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from elastic_launcher import ROOT
from elastic_launcher.errors import LauncherError
from elastic_launcher.local.hyperpod_agents import Container, AgentOperator, Pod
from elastic_launcher.local.driver import Rehearsal
from elastic_launcher.local.run import interrupts_deferred
from elastic_launcher.render.manifests import render

READY_MARGIN_S = 30.0  # beyond the graceful timeout, for the agent to report its workers stopped
DONE, FAILED = ("completed",), ("faulted", "gone")


def agents_bin(job) -> Path:
    """The directory of `local.agent_python`, whose `hyperpodrun` runs every pod; refused in one line
    (before anything is written) unless it is there and the job is a HyperPod one."""
    python = job.settings.local.agent_python
    if job.settings.target != "hyperpod":
        raise LauncherError(f"local.agent_python rehearses the HyperPod agent, not target={job.settings.target}: "
                            f"use target=hyperpod, or leave local.agent_python unset for torchrun")
    bin_dir = Path(python).expanduser().absolute().parent
    if not (bin_dir / "hyperpodrun").is_file():
        raise LauncherError(f"local.agent_python={python!r} has no hyperpodrun beside it: point it at the python of "
                            f"an environment with hyperpod-elastic-agent installed (`python scripts/image_venv.py` "
                            f"builds one from the image's pins and prints its python)")
    return bin_dir


def container_of(job, plan, config_dir: Path) -> Container:
    """What the rendered HyperPodPyTorchJob runs in each pod, with this machine's training configs."""
    rendered = render(plan, job.settings.cluster, "hyperpod", job.namespace, job.recipe_name)
    container = Container.from_objects(rendered.objects)
    files = {f.name: f.read_text() for f in sorted(config_dir.iterdir()) if f.is_file()}
    return Container(container.command, container.args, container.env, files, container.config_mount,
                     container.graceful_timeout)


class AgentRehearsal(Rehearsal):
    def __init__(self, *args, container: Container, venv_bin: Path):
        super().__init__(*args)
        self.agents = AgentOperator(container, self.local.run_dir / "pods", venv_bin, cwd=ROOT,
                               worker_args=[f"--run-dir={self.local.run_dir}",
                                            f"--pause-at-steps={','.join(map(str, self.pause_steps()))}"])
        self.pods: list[Pod] = []  # the nodes the job holds now or held last, in rank order
        self.coming: list[Pod] = []  # pods added for a launch or scale-up, not ready yet
        self.job: list[Pod] = []  # the pods started and not stopped since

    def running(self) -> bool:
        return bool(self.job) or super().running()

    def scaling_up(self) -> bool:
        return bool(self.coming)

    def logs(self) -> Path:
        return self.agents.work

    def execute(self, decision) -> None:
        """As the operator scales up: a launch or resize onto more nodes than there are pods first
        adds the pods and is carried out once they are ready (in place: their workers imported and
        waiting at the barrier); meanwhile the trainer waits at the trace event's step, so the resize
        lands there however slowly the pods start (the decision stands at every poll)."""
        wanted = decision.nodes if decision is not None and decision.action in ("launch", "resize") else 0
        if wanted > len(self.pods):
            self.coming += [self.agents.spawn_pod() for _ in range(wanted - len(self.pods) - len(self.coming))]
            for pod in self.coming:
                if pod.proc.poll() is not None:
                    raise LauncherError(f"the HyperPod agent of {pod.name} exited while starting: see {pod.log}")
            if any(self.agents.status(p)["status"] != "ready" for p in self.coming):
                return
            self.pods += self.coming
            self.coming = []
        super().execute(decision)

    def launch(self, nodes: int, reason: str) -> None:
        with interrupts_deferred():
            self.job = self.pods[:nodes]
            self.agents.start(self.job, self.agents.progress(self.job))
        self.operator.launched(nodes, time.time())
        self.timeline.add("launch", nodes=nodes, reason=reason, pods=[p.name for p in self.job])

    def stop_gracefully(self, reason: str) -> None:
        self.timeline.add("signal", signal="/stop", workers=len(self.job), nodes=self.operator.size, reason=reason)
        graceful = self._stop(graceful=True)
        self.timeline.add("exit", graceful=graceful,
                          **({} if graceful else {"reason": "graceful_shutdown_timeout passed"}))
        self.operator.stopped(time.time())

    def _stop(self, graceful: bool) -> bool:
        """/stop to the job's pods; whether every agent was ready (its workers stopped) in time. One
        that was not is stopped without grace (its workers killed)."""
        alive = [p for p in self.job if self.agents.status(p)["status"] not in FAILED]
        self.job = []
        if not alive:
            return True
        self.agents.stop(alive, graceful=graceful)
        try:
            self.agents.wait_status(alive, {"ready"}, self.policy.graceful_shutdown_timeout + READY_MARGIN_S)
            return True
        except TimeoutError:
            self.agents.stop(alive, graceful=False)
            self.agents.wait_status(alive, {"ready"}, READY_MARGIN_S)
            return False

    def remove_nodes(self, nodes: range) -> None:
        for pod in [self.pods[i] for i in nodes if i < len(self.pods)]:
            self.agents.remove(pod)  # Kubernetes deleting the pod: its memory volume goes with it
            self.pods.remove(pod)

    def kill_nodes(self, count: int) -> None:
        dead = self.job[-count:] if count and self.job else []
        for pod in dead:
            self.agents.remove(pod, signal.SIGKILL)  # the node dies, its memory with it
            self.pods.remove(pod)
            self.operator.lose_node()
        if dead:
            self.dying = True
            self.timeline.add("kill", pods=[p.name for p in dead], nodes=len(dead), signal="SIGKILL",
                              available=self.operator.available)

    def exit_code(self) -> int | None:
        if not self.job:
            return super().exit_code()
        statuses = [self.agents.status(p)["status"] for p in self.job]
        if any(s in FAILED for s in statuses):
            return 1
        return 0 if all(s in DONE for s in statuses) else None

    def forget_job(self, code: int) -> None:
        """The job ended: a failed one's pods are stopped (their workers killed) and ready again."""
        if self.job and code != 0:
            self._stop(graceful=False)
        self.job = []
        super().forget_job(code)

    def abort(self, grace: float, sig: int = signal.SIGTERM) -> None:
        if self.job:
            self._stop(graceful=grace > 0)
        super().abort(grace, sig)

    def close(self) -> None:
        self.agents.close()
        super().close()

