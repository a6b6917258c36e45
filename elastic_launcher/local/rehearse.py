"""Local elastic rehearsal: drive a recipe through a capacity trace the way the HyperPod operator
does (the decisions come from elastic_launcher/capacity/sizing_policy.py, which the capacity simulator shares), with
the real training entrypoint, then report what every resize cost.

Trace: a list of events, each at a `step` (the job's progress) or a `time` (seconds since start):
`{step: 6, nodes: 3}` sets the available capacity, `{step: 20, kill: true}` SIGKILLs a worker (its
node dies and leaves the capacity). The driver applies the recipe's elastic_policy: only allowed
sizes, the largest that fits the capacity; a scale-up waits `scaling_timeout` of stable capacity,
`scale_up_snooze_time` after a restart and `local.min_stable_period` after the last resize; after a
failure it waits `faulty_timeout`. A resize is SIGUSR1 to every worker, up to
`graceful_shutdown_timeout` for a clean exit (then SIGKILL), and a relaunch at the new size that
resumes from the newest complete checkpoint.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import time
from pathlib import Path

from elastic_launcher.capacity.sizing_policy import Operator
from elastic_launcher.capacity.traces import TraceEvent, parse_trace
from elastic_launcher.errors import LauncherError
from elastic_launcher.job import Job
from elastic_launcher.local import report as rehearsal_report
from elastic_launcher.local.run import (LocalJob, child_pids, interrupts_deferred, patient, prepare, run_dir_of,
                                        sigterm_as_interrupt, stop_job, stop_signal, stop_workers)
from elastic_launcher.local.timeline import Timeline
from elastic_launcher.planning.plan import Plan, make_plan
from training.contract.errors import ConfigError
from training.contract.records import read_records

POLL_SECONDS = 0.2


class Rehearsal:
    def __init__(self, plan: Plan, local: LocalJob, trace: list[TraceEvent], min_stable_period: float, log_path: Path):
        self.plan, self.local, self.trace = plan, local, list(trace)
        self.policy = plan.policy
        args = plan.sizes[0].config.training_config.training_args
        if args.max_epochs:
            raise LauncherError(f"a rehearsal needs a fixed length: set recipes.training_config.training_args."
                                f"max_epochs=null and max_steps=<steps> (max_epochs={args.max_epochs:g} resolves "
                                f"only once the trainer has tokenized the data)")
        self.max_steps = args.max_steps
        self.timeline = Timeline()
        self.operator = Operator([s.nodes for s in plan.sizes], plan.policy, min_stable_period, self.timeline.started)
        self.log = open(log_path, "ab")
        self.proc = None
        self.dying = False  # a worker was killed: the job is failing, not to be stopped gracefully

    def progress(self) -> int:
        return max((r["step"] for r in read_records(self.local.run_dir) if "loss" in r), default=0)

    def launch(self, nodes: int, reason: str) -> None:
        # The trainer waits after each step a trace event names until the event is applied, so
        # events fire at their step exactly, however fast the steps are.
        pause_at = sorted({e.step for e in self.trace if e.step is not None and e.step > self.progress()})
        with interrupts_deferred():  # an interrupt now stops the job just launched, not the one before
            self.proc = self.local.start(nodes, log=self.log, pause_at=pause_at)
        self.operator.launched(nodes, time.time())
        self.timeline.add("launch", nodes=nodes, reason=reason, pid=self.proc.pid)

    def stop_gracefully(self, reason: str) -> None:
        workers = child_pids(self.proc.pid)
        self.timeline.add("signal", signal="SIGUSR1", workers=len(workers), nodes=self.operator.size, reason=reason)
        graceful = stop_workers(self.proc, self.policy.graceful_shutdown_timeout, signal.SIGUSR1)
        self.timeline.add("exit", graceful=graceful,
                          **({} if graceful else {"reason": "graceful_shutdown_timeout passed"}))
        self.proc = None
        self.operator.stopped(time.time())

    def kill_worker(self) -> None:
        workers = child_pids(self.proc.pid) if self.proc else []
        if not workers:
            return
        os.kill(workers[-1], signal.SIGKILL)
        self.local.lose_nodes(len(workers) // self.local.nproc_per_node - 1)  # the dead node's memory with it
        self.operator.lose_node()
        self.dying = True
        self.timeline.add("kill", pid=workers[-1], signal="SIGKILL", available=self.operator.available)

    def release(self, step: int) -> None:
        """Let a trainer waiting after `step` go on (once the trace's events there are applied)."""
        (self.local.run_dir / f"release-{step}").touch()

    def apply_trace(self, step: int) -> None:
        elapsed = time.time() - self.timeline.started
        while self.trace and self.trace[0].due(step, elapsed):
            event = self.trace.pop(0)
            if event.kill:
                self.kill_worker()
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
        self.local.lose_nodes(*range(decision.nodes or 0, old))  # the pods a scale-down deletes
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
            if self.proc is not None and self.proc.poll() is not None:  # the job ended by itself
                code = self.proc.returncode
                self.proc, self.dying = None, False
                if code == 0 and self.progress() >= self.max_steps:
                    self.timeline.add("done", step=self.progress())
                    return
                self.operator.failed(now)
                self.timeline.add("failure", code=code, step=self.progress(), available=self.operator.available)
            elif not self.dying:  # while dying, torchrun is tearing the job down after the lost worker
                self.execute(self.operator.decide(now))
            if self.proc is not None and not self.dying:
                self.release(step)
            time.sleep(POLL_SECONDS)
        if self.proc is not None:
            stop_job(self.proc, grace=0)
        raise LauncherError(f"rehearsal did not finish within local.timeout={timeout:g}s (progress: step "
                            f"{self.progress()} of {self.max_steps}): raise local.timeout or shorten max_steps")


def run_reference(rehearsal: Rehearsal, reference: LocalJob, timeout: float) -> None:
    """The same steps at the rehearsal's first size, never interrupted: what the resizes must match."""
    nodes = next(e["nodes"] for e in rehearsal.timeline.events if e["event"] == "launch")
    print(f"reference run: {rehearsal.max_steps} steps at a fixed {nodes} node(s) in {reference.run_dir}", flush=True)
    with interrupts_deferred():
        rehearsal.proc = reference.start(nodes, log=rehearsal.log)
    deadline, shown = time.time() + timeout, 0
    while rehearsal.proc.poll() is None and time.time() < deadline:
        step = max((r["step"] for r in read_records(reference.run_dir) if "loss" in r), default=0)
        if step >= shown + 5 or (step and not shown):
            print(f"reference run: step {step} of {rehearsal.max_steps}", flush=True)
            shown = step
        time.sleep(POLL_SECONDS * 5)
    code = rehearsal.proc.poll()
    if code is None:
        stop_job(rehearsal.proc, grace=0)
    rehearsal.proc = None
    if code != 0:
        raise LauncherError(f"the fixed-size reference run failed or timed out: see {rehearsal.log.name}")


def run(job: Job) -> int:
    # Sample lineage is what proves a resize invisible: the rehearsal always records it.
    recipe = copy.deepcopy(job.recipe)
    recipe["training_config"]["logging"]["audit_samples"] = True
    plan = make_plan(recipe, job.plan.job_name, typed=job.typed)  # the dry run's plan, with the audit on
    if not plan.policy.is_elastic:
        raise ConfigError("action=rehearse needs an elastic recipe: add recipes.elastic_policy.is_elastic=true")
    settings = job.settings.local
    trace = parse_trace(settings.trace, plan.policy.max_nodes)
    # A rehearsal starts fresh: by default in a new directory beside the recipe's run directory, so it
    # never collides with a local run or an earlier rehearsal; the fixed-size reference lives inside it.
    run_dir = Path(settings.run_dir).resolve() if settings.run_dir else \
        run_dir_of(job).with_name(f"{run_dir_of(job).name}-rehearsal-{time.strftime('%Y%m%d-%H%M%S')}")
    reference_dir = run_dir / "fixed"
    if (run_dir / "metrics.jsonl").exists():
        raise LauncherError(f"{run_dir} already holds a run: a rehearsal starts fresh; set local.run_dir=<new dir> "
                            f"or leave it unset for a new timestamped directory")
    local = prepare(job, plan, run_dir)
    local.run_dir.mkdir(parents=True, exist_ok=True)
    rehearsal = Rehearsal(plan, local, trace, settings.min_stable_period, local.run_dir / "torchrun.log")
    print(f"rehearsing {plan.job_name} in {run_dir}", flush=True)
    with sigterm_as_interrupt():
        try:
            rehearsal.run(settings.timeout)
            if settings.compare:
                run_reference(rehearsal, LocalJob(local.config_dir, reference_dir, local.nproc_per_node),
                              settings.timeout)
        except KeyboardInterrupt as interrupt:
            grace = plan.policy.graceful_shutdown_timeout
            if rehearsal.proc is not None:
                with patient(f"still stopping: the workers are saving a checkpoint; waiting up to {grace:g}s before "
                             f"the rest is killed"):
                    stop_job(rehearsal.proc, grace, stop_signal(interrupt))
            print(f"stopped: the rehearsal in {run_dir} was interrupted; start a new one to rehearse again", flush=True)
            return 130
        finally:
            (local.run_dir / "timeline.json").write_text(json.dumps(rehearsal.timeline.events, indent=1))
    rehearsal.log.close()
    report = rehearsal_report.build(local.run_dir, rehearsal.timeline, reference_dir if settings.compare else None)
    print(report.summary(), flush=True)
    return 0 if report.matched in (None, True) else 1
