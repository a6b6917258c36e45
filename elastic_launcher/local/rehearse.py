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
resumes from the newest complete checkpoint. With `local.agent_python` the job runs under real
HyperPod agents instead, resized through their API (elastic_launcher.local.agent_rehearsal): with
`elastic_policy.in_place` the staying workers keep their process, and the report says so per resize.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from pathlib import Path

from elastic_launcher.capacity.traces import parse_trace
from elastic_launcher.errors import LauncherError
from elastic_launcher.job import Job
from elastic_launcher.local import report as rehearsal_report
from elastic_launcher.local.agent_rehearsal import AgentRehearsal, agents_bin, container_of
from elastic_launcher.local.driver import POLL_SECONDS, Rehearsal
from elastic_launcher.local.run import (STILL_STOPPING, LocalJob, interrupts_deferred, patient, prepare,
                                        run_dir_of, sigterm_as_interrupt, stop_job, stop_signal)
from elastic_launcher.planning.plan import make_plan
from elastic_launcher.words import plural
from training.contract.errors import ConfigError
from training.contract.judge import REPLAY_ENV
from training.contract.methods import method_facts
from training.contract.records import read_records


def launched_sizes(rehearsal: Rehearsal) -> list[int]:
    """The sizes the rehearsal ran at, first launch first, each once."""
    return list(dict.fromkeys(e["nodes"] for e in rehearsal.timeline.events if e["event"] == "launch"))


def run_reference(rehearsal: Rehearsal, reference: LocalJob, timeout: float, nodes: int | None = None) -> None:
    """The same steps never interrupted, at the rehearsal's first size (what the resizes must match) or
    at `nodes`."""
    nodes = nodes or launched_sizes(rehearsal)[0]
    print(f"reference run: {rehearsal.max_steps} steps at a fixed {plural(nodes, 'node')} in {reference.run_dir}", flush=True)
    rehearsal.log.flush()
    log_start = rehearsal.log_path.stat().st_size  # the reference's own lines follow
    with interrupts_deferred():
        rehearsal.proc = reference.start(nodes, log=rehearsal.log)
    deadline, shown, step = time.time() + timeout, 0, 0
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
    if code is None:
        raise LauncherError(f"the fixed-size reference run was still at step {step} of {rehearsal.max_steps} after "
                            f"local.timeout={timeout:g}s and was killed: raise local.timeout (log: "
                            f"{rehearsal.log_path})")
    if code != 0:
        raise LauncherError(f"the fixed-size reference run exited with {code} after step {step}: "
                            f"{failure_line(rehearsal.log_path, log_start)} (full log: {rehearsal.log_path})")


def measured_reordering(rehearsal: Rehearsal, reference_at, extra_env: tuple, metric: str,
                        timeout: float) -> tuple[int, Path] | None:
    """Where the resized run saw every sample the fixed-size run saw but its metric drifted past the
    strict bound: a second fixed-size run at the next size the rehearsal ran at (nodes, its directory),
    so that the verdict weighs the drift against what float32's reordering alone does here."""
    run_dir, fixed_dir = rehearsal.local.run_dir, rehearsal.local.run_dir / "fixed"
    drift = max(rehearsal_report.relative_differences(run_dir, fixed_dir, metric).values(), default=0.0)
    sizes = launched_sizes(rehearsal)
    if drift <= rehearsal_report.STRICT or len(sizes) < 2 or \
            rehearsal_report.first_difference(run_dir, fixed_dir) is not None:
        return None
    nodes, directory = sizes[1], run_dir / f"fixed-n{sizes[1]}"
    print(f"the {metric} drifted up to {drift:.1e} from the fixed-size run, every sample the same: a fixed-size run "
          f"at {plural(nodes, 'node')} measures what float32's reordering alone does", flush=True)
    run_reference(rehearsal, dataclasses.replace(reference_at(directory), extra_env=extra_env), timeout, nodes)
    return nodes, directory


def failure_line(log_path: Path, start: int) -> str:
    """What a failed run said of its failure, from byte `start` of its log on: the trainer's own
    one-line error, else torchrun's account of the first worker that failed."""
    with open(log_path, "rb") as log:
        log.seek(start)
        lines = log.read().decode(errors="replace").splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    if errors:
        return errors[0][len("error: "):]
    exits = [line.strip() for line in lines if line.strip().startswith(("exitcode", "error_file", "traceback"))]
    return ", ".join(exits[:3]) or (lines[-1].strip() if lines else "it wrote nothing")


def run(job: Job) -> int:
    # Sample lineage is what proves a resize invisible: the rehearsal always records it.
    settings = job.settings.local
    # A rehearsal starts fresh: by default in a new directory beside the recipe's run directory, so it
    # never collides with a local run or an earlier rehearsal; the fixed-size reference lives inside it.
    run_dir = Path(settings.run_dir).resolve() if settings.run_dir else \
        run_dir_of(job).with_name(f"{run_dir_of(job).name}-rehearsal-{time.strftime('%Y%m%d-%H%M%S')}")
    reference_dir = run_dir / "fixed"
    recipe = copy.deepcopy(job.recipe)
    recipe["training_config"]["logging"]["audit_samples"] = True
    checkpoints = recipe["training_config"].get("checkpoint", {})
    uri = checkpoints.get("uri")
    if uri:  # in a bucket: under a prefix of the rehearsal's own, as its directory is (the reference's inside it)
        checkpoints["uri"] = f"{uri.rstrip('/')}/{run_dir.name}"
    plan = make_plan(recipe, job.plan.job_name, typed=job.typed)  # the dry run's plan, with the audit on
    if not plan.policy.is_elastic:
        raise ConfigError("action=rehearse needs an elastic recipe: add recipes.elastic_policy.is_elastic=true")
    trace = parse_trace(settings.trace, plan.policy.max_nodes)
    if (run_dir / "metrics.jsonl").exists():
        raise LauncherError(f"{run_dir} already holds a run: a rehearsal starts fresh; set local.run_dir=<new dir> "
                            f"or leave it unset for a new timestamped directory")
    if settings.agent_python:
        venv_bin = agents_bin(job)
    local = prepare(job, plan, run_dir)

    def reference_at(directory: Path) -> LocalJob:
        """A fixed-size run's job in `directory` (in a bucket: its checkpoints under a prefix of its own);
        the agents' environment runs it too: the same torch."""
        reference = dataclasses.replace(local, run_dir=directory)
        if uri:
            checkpoints["uri"] = f"{uri.rstrip('/')}/{run_dir.name}/{directory.name}"
            reference = prepare(job, make_plan(recipe, job.plan.job_name, typed=job.typed), directory)
        return dataclasses.replace(reference, python=settings.agent_python) if settings.agent_python else reference

    reference = reference_at(reference_dir)
    if settings.agent_python:
        local = dataclasses.replace(local, python=settings.agent_python)
    local.run_dir.mkdir(parents=True, exist_ok=True)
    args = (plan, local, trace, settings.min_stable_period, local.run_dir / "torchrun.log",
            job.settings.cluster.job_max_retry_count)
    rehearsal = AgentRehearsal(*args, container=container_of(job, plan, local.config_dir), venv_bin=venv_bin) \
        if settings.agent_python else Rehearsal(*args)
    print(f"rehearsing {plan.job_name} in {run_dir}"
          + (f" under real HyperPod agents (their logs: {run_dir / 'pods'})" if settings.agent_python else ""),
          flush=True)
    metric = method_facts(plan.base.training_config.training_args.trainer_type).compared_metric
    replaying = ((REPLAY_ENV, str(local.run_dir)),)  # the same judge's verdicts as the elastic run's: the trainer is compared
    reordering = None
    with sigterm_as_interrupt():
        try:
            rehearsal.run(settings.timeout)
            if settings.compare:
                run_reference(rehearsal, dataclasses.replace(reference, extra_env=replaying), settings.timeout)
                reordering = measured_reordering(rehearsal, reference_at, replaying, metric, settings.timeout)
        except KeyboardInterrupt as interrupt:
            grace = plan.policy.graceful_shutdown_timeout
            if rehearsal.running():
                with patient(f"{STILL_STOPPING}; waiting up to {grace:g}s before the rest is killed"):
                    rehearsal.abort(grace, stop_signal(interrupt))
            print(f"stopped: the rehearsal in {run_dir} was interrupted; start a new one to rehearse again", flush=True)
            return 130
        finally:
            rehearsal.close()
            (local.run_dir / "timeline.json").write_text(json.dumps(rehearsal.timeline.events, indent=1))
    rehearsal.log.close()
    report = rehearsal_report.build(local.run_dir, rehearsal.timeline, reference_dir if settings.compare else None,
                                    metric, reordering)
    print(report.summary(), flush=True)
    return 0 if report.matched in (None, True) else 1
