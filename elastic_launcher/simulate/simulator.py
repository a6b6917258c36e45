"""Capacity simulator (`action=simulate`): what an elastic policy buys on a given capacity trace.

The job, its plan (allowed sizes, GPUs per node, tokens per step, steps) and its elastic policy are
the recipe's; the capacity trace says how many nodes are free over time. The operator's decisions
come from elastic_launcher/capacity/sizing_policy.py, the same code the rehearsal drives; here time is virtual
and every phase costs what the models say:
- throughput: steps/s per node count, measured (a run directory's metrics.jsonl) or a per-node
  rate with a scaling efficiency per doubling of nodes (default: the HyperPod blog's Llama-3 70B on
  p5, 2,000 tokens/s on 1 node, 14,000 on 8: 0.956 per doubling);
- a resize: graceful stop (finish the step + save the checkpoint: bytes / write bandwidth), then a
  restart (pods, rendezvous, model build) + resharded load (bytes / read bandwidth) + warm-up;
  measured values come from a rehearsal's rehearsal_report.json;
- a failure (a `kill` event): the job is torn down, loses the steps since its last periodic
  checkpoint (with `checkpoint.peer_steps` and one node lost, since its last peer copy) and
  restarts after `faulty_timeout`.
The elastic policy is compared with static jobs at its smallest and largest size (a static job
runs while its size fits and waits otherwise). Event-driven: a week at one-minute resolution
simulates in well under a second. Never imports torch.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from elastic_launcher.capacity.sizing_policy import Operator
from elastic_launcher.capacity.traces import TraceEvent, parse_trace
from elastic_launcher.errors import make_dir
from elastic_launcher.job import Job
from elastic_launcher.planning.node_memory import with_peer_steps
from elastic_launcher.planning.plan import Plan, checkpoint_gb, kept_policies
from elastic_launcher.simulate.chart import chart, chart_data
from elastic_launcher.simulate.outcome import Outcome, Point
from elastic_launcher.words import plural
from training.contract.errors import ConfigError
from training.contract.records import read_records


# --- models ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Throughput:
    """Steps per second at each node count: measured where known, scaled from the nearest measured
    (or the 1-node rate) by `efficiency` per doubling elsewhere."""

    measured: dict[int, float]  # nodes -> steps/s
    efficiency: float
    source: str

    def steps_per_s(self, nodes: int) -> float:
        if nodes in self.measured:
            return self.measured[nodes]
        near = min(self.measured, key=lambda m: (abs(math.log2(nodes / m)), m))
        ratio = nodes / near
        return self.measured[near] * ratio * self.efficiency ** math.log2(ratio)


@dataclass(frozen=True)
class ResizeCosts:
    """Seconds each phase of a resize or failure takes."""

    stop_s: float  # signal -> every worker exited, checkpoint saved
    start_s: float  # relaunch -> first step at the new size (restart, resharded load, warm-up)
    first_start_s: float  # the first launch (no checkpoint to read)
    teardown_s: float  # a failure: node lost -> job torn down
    source: str


# --- the event loop --------------------------------------------------------------------------------
class Simulation:
    """One job under one operator policy on one trace, in virtual time."""

    def __init__(self, name: str, sizes: list[int], plan: Plan, trace: list[TraceEvent], throughput: Throughput,
                 costs: ResizeCosts, total_steps: int, horizon_s: float, min_stable: float = 0.0, policy=None):
        self.name, self.sizes = name, sizes
        self.policy = policy or plan.policy
        self.operator = Operator(sizes, self.policy, min_stable)
        self.trace, self.next_event, self.throughput, self.costs = trace, 0, throughput, costs
        self.total, self.horizon = total_steps, horizon_s
        self.gpus = plan.instance.devices_per_node
        self.save_steps = plan.sizes[0].config.training_config.checkpoint.save_steps
        # Peer copies (training.state.peer_store): a single node's death costs the steps since the last
        # copy; two or more at once may take a node and its buddy, so they are priced at the checkpoint.
        self.peer_steps = plan.sizes[0].config.training_config.checkpoint.peer_steps
        self.tokens_per_step = plan.sizes[0].tokens_per_step
        # job state: phase is down | starting | running | stopping | failing, until phase_end
        self.phase, self.phase_end, self.size, self.next_size = "down", math.inf, 0, 0
        self.progress, self.saved, self.started_once = 0.0, 0.0, False
        self.saved_before_stop = 0.0  # the last periodic checkpoint: what a kill during a graceful stop falls back to
        self.out = Outcome(name, sizes, False, 0.0, 0.0, 0.0, 0.0,
                           {"start": 0.0, "resize": 0.0, "stop": 0.0, "failure": 0.0}, 0, 0, 0.0, {}, 0.0, 0.0)
        self._cost_kind = "start"

    def run(self) -> Outcome:
        t = 0.0
        while t < self.horizon:
            self._apply_trace(t)
            self._end_phase(t)
            if self.progress >= self.total - 1e-9:
                self.out.finished = True
                break
            if self.phase in ("down", "running", "starting"):
                self._decide(t)
            t_next = min(self._next_event(t), self.horizon)
            self._advance(t, t_next)
            t = t_next
        self.out.hours = t / 3600
        self.out.steps = min(self.progress, self.total)
        used = self.out.gpu_hours_used
        self.out.tokens_per_gpu_hour = self.out.steps * self.tokens_per_step / used if used else 0.0
        self.out.timeline.append(Point(t, self.operator.available, self.size, self.out.steps, self.phase))
        return self.out

    def _apply_trace(self, t: float) -> None:
        while self.next_event < len(self.trace) and self.trace[self.next_event].due(self.progress + 1e-9, t + 1e-9):
            event = self.trace[self.next_event]
            self.next_event += 1
            if event.kill:  # nodes die: the job's if every free node is the job's, else spare ones first
                hit = min(self.size, event.kill - max(0, self.operator.available - self.size)) if self.phase != "down" else 0
                for _ in range(event.kill):
                    self.operator.lose_node()
                if hit > 0:
                    self._fail(t, hit)
            else:
                self.operator.set_capacity(event.nodes, t)

    def _fail(self, t: float, killed: int = 1) -> None:
        if self.phase not in ("running", "starting", "stopping"):
            return
        self.out.failures += 1
        if self.phase == "stopping":  # the stop's checkpoint dies with the node: back to the last periodic one
            self.saved = self.saved_before_stop
        elif self.peer_steps and killed == 1 and self.size > 1:  # its buddy holds the dead node's copy
            self.saved = max(self.saved, math.floor(self.progress / self.peer_steps + 1e-9) * self.peer_steps)
        redone = self.progress - self.saved  # steps since the newest copy: done again after the restart
        if self.size:
            self.out.lost["failure"] += redone / self.throughput.steps_per_s(self.size) * self.size * self.gpus / 3600
            if redone:
                self.out.steps_by_nodes[self.size] -= redone
        self.out.redone_steps += redone
        self.progress = self.saved
        self.phase, self.phase_end, self._cost_kind = "failing", t + self.costs.teardown_s, "failure"

    def _end_phase(self, t: float) -> None:
        if t < self.phase_end:
            return
        if self.phase == "starting":
            self.phase, self.phase_end = "running", math.inf
        elif self.phase == "stopping":
            self.operator.stopped(t)
            self.size, self.phase, self.phase_end = 0, "down", math.inf
            relaunch = self.operator.target()  # the capacity now, not when the stop began: nodes may be gone
            if self.next_size and relaunch:
                self._launch(relaunch, t, "resize")
        elif self.phase == "failing":
            self.operator.failed(t)
            self.size, self.phase, self.phase_end = 0, "down", math.inf

    def _decide(self, t: float) -> None:
        decision = self.operator.decide(t)
        if decision is None:
            return
        if decision.action == "launch":
            self._launch(decision.nodes, t, "failure" if self._cost_kind == "failure" else "start")
            return
        if self.phase == "starting" and decision.nodes > self.size:
            return  # growing waits until the job runs; a start losing its nodes stops at once (below)
        self.out.resizes += decision.action == "resize"
        self.saved_before_stop, self.saved = self.saved, self.progress  # a graceful stop checkpoints
        self.phase, self.phase_end, self.next_size = "stopping", t + self.costs.stop_s, decision.nodes
        self._cost_kind = "resize" if decision.action == "resize" else "stop"

    def _launch(self, nodes: int, t: float, kind: str) -> None:
        self.operator.launched(nodes, t)
        cost = self.costs.start_s if self.started_once else self.costs.first_start_s
        self.started_once = True
        self.size, self.phase, self.phase_end, self._cost_kind = nodes, "starting", t + cost, kind

    def _next_event(self, t: float) -> float:
        candidates = [self.phase_end]
        if self.next_event < len(self.trace):
            e = self.trace[self.next_event]
            if e.time is not None:
                candidates.append(e.time)
            elif self.phase == "running":
                candidates.append(t + max(0.0, e.step - self.progress) / self.throughput.steps_per_s(self.size))
        if self.phase == "running":
            rate = self.throughput.steps_per_s(self.size)
            candidates.append(t + (self.total - self.progress) / rate)
            next_save = (math.floor(self.progress / self.save_steps + 1e-9) + 1) * self.save_steps
            candidates.append(t + (next_save - self.progress) / rate)
        if self.phase in ("down", "running"):  # a start losing its nodes reacts to the trace event itself
            due = self.operator.next_decision_at(t)
            if due is not None:
                candidates.append(due)
        nxt = min(candidates)
        return nxt if nxt > t else t + 1e-6

    def _advance(self, t0: float, t1: float) -> None:
        dt_h = (t1 - t0) / 3600
        held = self.size if self.phase in ("starting", "running", "stopping", "failing") else 0
        last = self.out.timeline[-1] if self.out.timeline else None
        if last is None or (last.capacity, last.held, last.phase) != (self.operator.available, held, self.phase):
            self.out.timeline.append(Point(t0, self.operator.available, held, self.progress, self.phase))  # as at t0
        self.out.gpu_hours_used += held * self.gpus * dt_h
        self.out.gpu_hours_idle += max(0, self.operator.available - held) * self.gpus * dt_h
        if self.phase == "running":
            steps = min(self.throughput.steps_per_s(self.size) * (t1 - t0), self.total - self.progress)
            self.progress += steps
            self.out.steps_by_nodes[self.size] = self.out.steps_by_nodes.get(self.size, 0.0) + steps
            self.out.gpu_hours_productive += held * self.gpus * dt_h
            self.saved = max(self.saved, math.floor(self.progress / self.save_steps + 1e-9) * self.save_steps)
        elif held:
            self.out.lost[self._cost_kind] += held * self.gpus * dt_h


# --- inputs ----------------------------------------------------------------------------------------
def measured_throughput(run_dir: Path, nproc_per_node: int, efficiency: float) -> Throughput:
    """Steps/s per node count from a run's metrics.jsonl: the time between consecutive steps of one
    launch (so restarts and first-step warm-up are not counted as training time)."""
    records = read_records(run_dir)
    nodes_of = {r["launch"]: r.get("nodes", r["world_size"] // nproc_per_node)
                for r in records if r.get("event") == "start"}
    spans: dict[int, list[float]] = {}
    by_launch: dict[str, list[dict]] = {}
    for r in records:
        if "loss" in r:
            by_launch.setdefault(r["launch"], []).append(r)
    for launch, steps in by_launch.items():
        if len(steps) > 1 and launch in nodes_of:
            spans.setdefault(nodes_of[launch], [0.0, 0.0])
            spans[nodes_of[launch]][0] += steps[-1]["time"] - steps[0]["time"]
            spans[nodes_of[launch]][1] += steps[-1]["step"] - steps[0]["step"]
    measured = {n: count / seconds for n, (seconds, count) in spans.items() if seconds > 0 and count > 0}
    if not measured:
        raise ConfigError(f"simulate.throughput={str(run_dir)!r} has no launch with two or more steps in "
                          f"metrics.jsonl: give a run directory that trained, or leave it unset for the model")
    return Throughput(measured, efficiency, f"measured in {run_dir}")


def measured_costs(report_path: Path) -> ResizeCosts:
    report = json.loads(Path(report_path).read_text())
    transitions = report.get("transitions", [])

    def mean(key, cause):
        values = [t[key] for t in transitions if t["cause"] == cause and t.get(key) is not None]
        return statistics.fmean(values) if values else None

    start = mean("relaunch_to_first_step_s", "resize") or mean("relaunch_to_first_step_s", "failure")
    if start is None:
        raise ConfigError(f"simulate.costs={str(report_path)!r} records no resize: rehearse a trace with at least one")
    return ResizeCosts(stop_s=mean("signal_to_exit_s", "resize") or 0.0, start_s=start,
                 first_start_s=report.get("first_start_s") or start,
                 teardown_s=mean("signal_to_exit_s", "failure") or 0.0, source=f"measured in {report_path}")


def modelled_costs(plan: Plan, s) -> ResizeCosts:
    gb = s.checkpoint_gb if s.checkpoint_gb is not None else _checkpoint_gb(plan)
    return ResizeCosts(stop_s=s.graceful_stop_s + gb / s.write_gb_per_s, start_s=s.restart_s + gb / s.read_gb_per_s + s.warmup_s,
                 first_start_s=s.restart_s + s.warmup_s, teardown_s=s.graceful_stop_s,
                 source=f"modelled: {gb:,.0f} GB checkpoint at {s.write_gb_per_s:g} GB/s write, {s.read_gb_per_s:g} "
                        f"GB/s read, {s.graceful_stop_s:g} s stop, {s.restart_s:g} s restart, {s.warmup_s:g} s warm-up")


def _checkpoint_gb(plan: Plan) -> float:
    """The plan's checkpoint size, from the model's shape (the recipe's hardware.model_shape or its
    inline architecture)."""
    mc = plan.sizes[0].config.training_config.model_config
    try:
        return checkpoint_gb(plan.hardware.model_shape or mc.architecture, mc,
                             kept_policies(plan.sizes[0].config.training_config))
    except (ConfigError, KeyError, TypeError):
        raise ConfigError(f"simulate.checkpoint_gb is not set and the size of model {mc.model_name_or_path!r} is not "
                          f"known: set simulate.checkpoint_gb=<GB> (or simulate.costs=<rehearsal_report.json>)") from None


# --- policies, sweep, report -----------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    name: str
    sizes: list[int]
    policy: object
    min_stable: float = 0.0


BASELINES = ("elastic", "static at min", "static at max")


def candidates(plan: Plan, sweep: bool, min_stable: float) -> list[Candidate]:
    """The recipe's policy and static jobs at its smallest and largest size; with `sweep`, the
    alternatives a user would weigh: other min/max, every size vs the scale_config sizes, longer or
    shorter scaling_timeout, a scale-up snooze."""
    sizes = [s.nodes for s in plan.sizes]
    out = [Candidate("elastic", sizes, plan.policy, min_stable),
           Candidate("static at min", [sizes[0]], plan.policy),
           Candidate("static at max", [sizes[-1]], plan.policy)]
    if not sweep:
        return out
    p = plan.policy
    for low in sizes:
        for high in sizes:
            if high <= low:
                continue
            for kind, chosen in (("discrete", [n for n in sizes if low <= n <= high]),
                                 ("step", list(range(low, high + 1)))):
                for timeout in sorted({0, p.scaling_timeout, 4 * p.scaling_timeout or 600}):
                    for snooze in sorted({0, p.scale_up_snooze_time, 3600}):
                        policy = replace(p, min_nodes=low, max_nodes=high, scaling_timeout=timeout,
                                         scale_up_snooze_time=snooze)
                        out.append(Candidate(f"{kind} {low}..{high}, timeout {timeout:g}s, snooze {snooze:g}s",
                                             chosen, policy, min_stable))
    return out


def simulate(plan: Plan, settings, out_dir: Path) -> dict:
    """Run every candidate on the trace; write simulation.json and simulation.png; return the report."""
    started = time.perf_counter()
    ta = plan.sizes[0].config.training_config.training_args
    total = settings.steps or (None if ta.max_epochs else ta.max_steps)
    if not total:
        raise ConfigError("simulate.steps is not set and the recipe counts epochs (max_epochs): set simulate.steps=<steps>")
    horizon = settings.horizon_days * 86400.0
    trace = parse_trace(settings.capacity, plan.policy.max_nodes, "simulate.capacity", settings.repeat_daily, horizon)
    most = max(e.nodes for e in trace if e.nodes is not None)
    if most < plan.sizes[0].nodes:
        raise ConfigError(f"simulate.capacity={settings.capacity!r} never frees more than {plural(most, 'node')}, fewer than the "
                          f"policy's smallest size ({plan.sizes[0].nodes}): no policy could start; lower "
                          f"recipes.elastic_policy.min_nodes or check the trace")
    nproc = plan.nproc_per_node
    throughput = measured_throughput(Path(settings.throughput), nproc, settings.scaling_efficiency) \
        if settings.throughput else Throughput({1: settings.tokens_per_s_per_node / plan.sizes[0].tokens_per_step},
                                               settings.scaling_efficiency,
                                               f"{settings.tokens_per_s_per_node:,.0f} tokens/s on 1 node, "
                                               f"x{settings.scaling_efficiency:g} efficiency per doubling")
    costs = measured_costs(Path(settings.costs)) if settings.costs else modelled_costs(plan, settings)
    def play(c: Candidate, on: Plan = plan) -> Outcome:
        return Simulation(c.name, c.sizes, on, trace, throughput, costs, total, horizon, c.min_stable, c.policy).run()

    chosen = candidates(plan, settings.sweep, settings.min_stable_period)
    outcomes = [play(c) for c in chosen]
    # What peer copies buy (or would): the elastic policy (the first) again with them flipped, where it
    # had a failure (peer copies change nothing else).
    peer_steps = plan.base.training_config.checkpoint.peer_steps or 0
    other = play(chosen[0], with_peer_steps(plan, 0 if peer_steps else 1)) if outcomes[0].failures else outcomes[0]
    seconds = time.perf_counter() - started
    report = {"job": plan.job_name, "instance": plan.instance.name, "gpus_per_node": plan.instance.devices_per_node,
              "steps": total, "horizon_days": settings.horizon_days, "tokens_per_step": plan.sizes[0].tokens_per_step, "throughput": throughput.source,
              "steps_per_s": {n: throughput.steps_per_s(n) for n in sorted({n for o in outcomes for n in o.sizes})},
              "costs": asdict(costs), "simulated_in_s": round(seconds, 4),
              "peer_copies": {"peer_steps": peer_steps, "redone_steps": outcomes[0].redone_steps,
                              "failure_gpu_h": outcomes[0].lost["failure"], "flipped_redone_steps": other.redone_steps,
                              "flipped_failure_gpu_h": other.lost["failure"]},
              "outcomes": [{**{k: v for k, v in asdict(o).items() if k != "timeline"},
                            "idle_gpu_hours_per_day": o.idle_per_day,
                            "resizes_cost_more_than_they_gain": _not_worth_it(o, outcomes)} for o in outcomes]}
    make_dir(out_dir, "output_dir")
    (out_dir / "simulation.json").write_text(json.dumps(report, indent=1))
    trace_name = settings.capacity if isinstance(settings.capacity, str) else f"{len(trace)}-event trace"
    p = plan.policy
    title = (f"{plan.job_name} on {trace_name}: elastic {', '.join(map(str, outcomes[0].sizes))} nodes "
             f"(scaling_timeout {p.scaling_timeout:g}s, snooze {p.scale_up_snooze_time:g}s) vs static")
    chart(out_dir / "simulation.png", chart_data(outcomes[:3], title, plan.sizes[0].tokens_per_step,
                                                 settings.repeat_daily), plan.instance.devices_per_node)
    return report


def _not_worth_it(o: Outcome, outcomes: list[Outcome]) -> bool:
    """An elastic policy whose resize losses exceed the productive GPU-hours it adds over a static
    job at its smallest size."""
    if len(o.sizes) < 2:
        return False
    static = next((s for s in outcomes if s.sizes == [o.sizes[0]]), None)
    if static is None:
        return False
    gained = o.gpu_hours_productive - static.gpu_hours_productive * (o.hours / max(static.hours, 1e-9))
    return o.lost["resize"] > max(gained, 0.0)


def _failures_line(peers: dict, failures: int) -> str:
    """What the elastic policy's failures cost, with peer copies and without."""
    ran = (peers["redone_steps"], peers["failure_gpu_h"])
    flipped = (peers["flipped_redone_steps"], peers["flipped_failure_gpu_h"])
    (on, off), how = ((ran, flipped), "on") if peers["peer_steps"] else ((flipped, ran), "off")
    return (f"elastic's {plural(failures, 'failure')}, steps trained again: {on[0]:,.1f} with peer copies "
            f"({on[1]:,.1f} GPU-h), {off[0]:,.1f} without ({off[1]:,.1f} GPU-h); this recipe has them {how} "
            f"(training_config.checkpoint.peer_steps)")


def summary(report: dict, limit: int = 12) -> str:
    header = ("policy", "finish h", "GPU-h used", "idle GPU-h/day", "resizes", "failures", "lost GPU-h",
              "tokens/GPU-h")
    rows = [header]
    ranked = sorted(report["outcomes"], key=lambda o: (not o["finished"], o["hours"], o["gpu_hours_used"]))
    shown: dict[tuple, list] = {}  # sweep policies with the same result share a row; the baselines never do
    for o in ranked:
        alike = (round(o["hours"], 3), round(o["gpu_hours_used"], 1), o["resizes"], o["failures"])
        shown.setdefault((o["policy"],) if o["policy"] in BASELINES else alike, []).append(o)
    groups = list(shown.values())
    baselines = [g for g in groups[limit:] if any(o["policy"] in BASELINES for o in g)]
    for group in groups[:limit] + baselines:
        o, lost = group[0], sum(group[0]["lost"].values())
        flag = " (resizes cost more than they gain)" if o["resizes_cost_more_than_they_gain"] else ""
        same = f" (+{len(group) - 1} alike)" if len(group) > 1 else ""
        rows.append((o["policy"] + same + flag, (f"{o['hours']:.1f}" if o["hours"] >= 1 else f"{o['hours']:.3f}") + ("" if o["finished"] else "+"),
                     f"{o['gpu_hours_used']:,.0f}", f"{o['idle_gpu_hours_per_day']:,.0f}", str(o["resizes"]),
                     str(o["failures"]), f"{lost:,.1f}", f"{o['tokens_per_gpu_hour']:,.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    elastic, static = report["outcomes"][0], report["outcomes"][1]
    absorbed = static["idle_gpu_hours_per_day"] - elastic["idle_gpu_hours_per_day"]
    lines += [f"{report['job']}: {report['steps']:,} steps of {report['tokens_per_step']:,} tokens; "
              f"throughput {report['throughput']}; costs {report['costs']['source']}",
              f"elastic vs {static['policy']}: absorbs {absorbed:,.0f} of its {static['idle_gpu_hours_per_day']:,.0f} "
              f"idle GPU-hours per day; held without training: "
              + ", ".join(f"{k} {v:,.1f} GPU-h" for k, v in elastic["lost"].items())
              + f"; simulated in {report['simulated_in_s']:.3f} s"]
    if elastic["failures"]:
        lines.append(_failures_line(report["peer_copies"], elastic["failures"]))
    if any(len(g) > 1 for g in groups):
        lines.append("+N alike: N more sweep policies with the same finish time, GPU-hours, resizes and failures "
                     "(each listed in simulation.json)")
    if not all(o["finished"] for o in report["outcomes"]):
        lines.append(f"{report['horizon_days'] * 24:.1f}+: not finished within the simulated horizon "
                     f"(simulate.horizon_days={report['horizon_days']:g})")
    if len(groups) > limit + len(baselines):
        lines.append(f"({len(groups) - limit - len(baselines)} more results in simulation.json)")
    return "\n".join(lines)


def run(job: Job) -> int:
    settings = job.settings.simulate
    if not job.plan.policy.is_elastic:
        raise ConfigError("action=simulate needs an elastic recipe: add recipes.elastic_policy.is_elastic=true")
    out_dir = Path(job.settings.output_dir) / job.plan.job_name / "simulation"
    report = simulate(job.plan, settings, out_dir)
    print(summary(report), flush=True)
    print(f"wrote {out_dir / 'simulation.json'}, {out_dir / 'simulation.png'}", flush=True)
    return 0
