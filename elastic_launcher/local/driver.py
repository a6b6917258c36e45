"""The rehearsal's driver: the capacity trace applied step by step, the operator's decisions
(elastic_launcher.capacity.sizing_policy) carried out on a torchrun job on this machine. The job's
side (launch, stop, exit) is a handful of methods that the agents' driver
(elastic_launcher.local.agent_rehearsal) replaces.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from elastic_launcher.capacity.sizing_policy import Operator
from elastic_launcher.capacity.traces import TraceEvent
from elastic_launcher.errors import LauncherError
from elastic_launcher.local.run import LocalJob, child_pids, interrupts_deferred, stop_job, stop_workers
from elastic_launcher.local.timeline import Timeline
from elastic_launcher.planning.plan import Plan
from training.contract.records import read_records

POLL_SECONDS = 0.2


class Rehearsal:
    def __init__(self, plan: Plan, local: LocalJob, trace: list[TraceEvent], min_stable_period: float, log_path: Path,
                 max_retries: int):
        """`max_retries`: the manifest's jobMaxRetryCount (cluster.job_max_retry_count): the operator
        restarts a failed job that often, then fails it."""
        self.plan, self.local, self.trace, self.max_retries = plan, local, list(trace), max_retries
        self.failures = 0
        self.policy = plan.policy
        args = plan.sizes[0].config.training_config.training_args
        if args.max_epochs:
            raise LauncherError(f"a rehearsal needs a fixed length: set recipes.training_config.training_args."
                                f"max_epochs=null and max_steps=<steps> (max_epochs={args.max_epochs:g} resolves "
                                f"only once the trainer has tokenized the data)")
        self.max_steps = args.max_steps
        self.timeline = Timeline()
        self.operator = Operator([s.nodes for s in plan.sizes], plan.policy, min_stable_period, self.timeline.started)
        self.log_path, self.log = log_path, open(log_path, "ab")
        self.proc = None
        self.dying = False  # a worker was killed: the job is failing, not to be stopped gracefully

    def progress(self) -> int:
        return max((r["step"] for r in read_records(self.local.run_dir) if "loss" in r), default=0)

    def pause_steps(self) -> list[int]:
        """The steps a trace event names, still ahead: the trainer waits after each until it is
        applied, so events fire at their step exactly, however fast the steps are."""
        return sorted({e.step for e in self.trace if e.step is not None and e.step > self.progress()})

    # --- the job (torchrun here; real HyperPod agents in elastic_launcher.local.agent_rehearsal) ---------
    def running(self) -> bool:
        return self.proc is not None

    def scaling_up(self) -> bool:
        """Whether a decided scale-up waits for its new nodes (torchrun's come at once)."""
        return False

    def exit_code(self) -> int | None:
        """The job's exit code once it ended by itself (done or failed), else None."""
        return self.proc.poll() if self.proc is not None else None

    def logs(self) -> Path:
        """Where a failed job's workers wrote."""
        return self.log_path

    def forget_job(self, code: int) -> None:
        """The job ended by itself with exit `code`: nothing of it is left to stop."""
        self.proc = None

    def abort(self, grace: float, sig: int = signal.SIGTERM) -> None:
        """Stop the whole job (an interrupt, the timeout): `sig` to the workers, killed past `grace`."""
        if self.proc is not None:
            stop_job(self.proc, grace, sig)
            self.proc = None

    def remove_nodes(self, nodes: range) -> None:
        """The nodes a scale-down gives back: their node-local tier goes with them."""
        self.local.lose_nodes(*nodes)

    def close(self) -> None:
        """Nothing is left running once the rehearsal ends (torchrun dies with the launcher)."""

    def launch(self, nodes: int, reason: str) -> None:
        with interrupts_deferred():  # an interrupt now stops the job just launched, not the one before
            self.proc = self.local.start(nodes, log=self.log, pause_at=self.pause_steps())
        self.operator.launched(nodes, time.time())
        self.timeline.add("launch", nodes=nodes, reason=reason, pid=self.proc.pid)

    def stop_gracefully(self, reason: str) -> None:
        # An interrupt meanwhile is raised once the stop is done (within the graceful timeout): raised
        # halfway, it would find the job neither running nor gone and stop it a second time.
        with interrupts_deferred():
            workers = child_pids(self.proc.pid)
            self.timeline.add("signal", signal="SIGUSR1", workers=len(workers), nodes=self.operator.size, reason=reason)
            graceful = stop_workers(self.proc, self.policy.graceful_shutdown_timeout, signal.SIGUSR1)
            self.timeline.add("exit", graceful=graceful,
                              **({} if graceful else {"reason": "graceful_shutdown_timeout passed"}))
            self.proc = None
            self.operator.stopped(time.time())

    def kill_nodes(self, count: int) -> None:
        """The job's last `count` nodes die at once: every worker of theirs SIGKILLed, their memory lost."""
        workers = child_pids(self.proc.pid) if self.proc else []
        nodes = len(workers) // self.local.nproc_per_node
        count = min(count, nodes)
        if not count:
            return
        dead = workers[(nodes - count) * self.local.nproc_per_node:]
        for pid in dead:
            os.kill(pid, signal.SIGKILL)
        self.local.lose_nodes(*range(nodes - count, nodes))  # the dead nodes' memory with them
        for _ in range(count):
            self.operator.lose_node()
        self.dying = True
        self.timeline.add("kill", pids=dead, nodes=count, signal="SIGKILL", available=self.operator.available)

    def release(self, step: int) -> None:
        """Let a trainer waiting after `step` go on (once the trace's events there are applied)."""
        (self.local.run_dir / f"release-{step}").touch()

    def apply_trace(self, step: int) -> None:
        elapsed = time.time() - self.timeline.started
        while self.trace and self.trace[0].due(step, elapsed):
            event = self.trace.pop(0)
            if event.kill:
                self.kill_nodes(event.kill)
            elif self.operator.set_capacity(event.nodes, time.time()):
                self.timeline.add("capacity", available=event.nodes, at_step=step)

    def execute(self, decision) -> None:
        if decision is None:
            return
        if decision.action == "launch":
            self.launch(decision.nodes, decision.reason)
            return
        old = self.operator.size
        self.stop_gracefully(decision.reason)
        self.remove_nodes(range(decision.nodes or 0, old))  # the pods a scale-down deletes
        if decision.nodes:
            self.launch(decision.nodes, "scale down" if decision.nodes < old else "scale up")

    def run(self, timeout: float) -> None:
        try:
            self._drive(timeout)
        finally:  # the release markers served their steps: leave none behind
            for marker in self.local.run_dir.glob("release-*"):
                marker.unlink(missing_ok=True)

    def _drive(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            step = self.progress()
            self.apply_trace(step)
            now = time.time()
            code = self.exit_code()
            if code is not None:  # the job ended by itself
                self.forget_job(code)
                self.dying = False
                if code == 0 and self.progress() >= self.max_steps:
                    self.timeline.add("done", step=self.progress())
                    return
                self.operator.failed(now)
                self.timeline.add("failure", code=code, step=self.progress(), available=self.operator.available)
                self.failures += 1
                if self.failures > self.max_retries:
                    raise LauncherError(
                        f"the job failed {self.failures} times, the last with exit code {code} at step "
                        f"{self.progress()}: past cluster.job_max_retry_count={self.max_retries}, the operator fails it "
                        f"(see {self.logs()}); fix the cause, or raise cluster.job_max_retry_count")
            elif not self.dying:  # while dying, the job is torn down after the lost worker
                self.execute(self.operator.decide(now))
            if self.running() and not self.dying and not self.scaling_up():  # an event's resize lands at its step
                self.release(step)
            time.sleep(POLL_SECONDS)
        self.abort(grace=0)
        raise LauncherError(f"rehearsal did not finish within local.timeout={timeout:g}s (progress: step "
                            f"{self.progress()} of {self.max_steps}): raise local.timeout or shorten max_steps")
