"""When a GRPO run cannot learn, said while it runs: each step's record watched for the ways
a run burns compute without learning, each said once, naming the key to change.

- No signal: a group whose completions all scored alike has zero advantage (training.rl.algorithms),
  so when nearly every group is flat the step teaches nothing.
- Cut completions: when nearly every completion ends at max_new_tokens, the reward scores unfinished
  answers and the model learns to fill the budget.
- Runaway KL: the policy far from the reference, step after step (a reward being gamed, or a learning
  rate too high for the task).
- A collapsing effective sample size: with the rollout running behind (max_steps_off_policy), the
  correction's weights concentrate on a few tokens once the policy moves far from the one that drew.
- A failing judge (RLAIF): a step where more than half its verdicts failed is said at once, and a run
  whose every verdict failed for `judge.max_failed_steps` steps in a row stops: its groups are flat
  because nothing judged them, whatever the reward's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from training.contract.judge import failed_verdicts as judge_failures

KEY = "training_config.training_args"
STEPS = 3  # consecutive steps a condition holds before it is said


@dataclass(frozen=True)
class Signal:
    name: str
    holds: Callable[[dict], bool]  # of a step's record
    message: Callable[[dict], str]


def judge_calls(record: dict) -> tuple[float, dict[str, int]]:
    """A step's verdicts (asked or from the ledger) and its failed ones by kind."""
    return record.get("judge_calls", 0) + record.get("judge_cached", 0), judge_failures(record)


TOOL_FAILURES = (("raised", "tool_raised"), ("timeout", "tool_timeouts"))  # (kind, the step record's count)


def tool_calls(record: dict) -> tuple[float, dict[str, int]]:
    """A step's tool calls that reached a tool (not those the model got wrong: no such tool, unreadable,
    arguments that do not fit, which say nothing of the environment) and its failed ones by kind."""
    reached = record.get("tool_calls", 0) - record.get("tool_errors", 0) + record.get("tool_raised", 0)
    return reached, {kind: int(record[key]) for kind, key in TOOL_FAILURES if record.get(key)}


def _mostly_failed(calls: float, failed: dict[str, int]) -> bool:
    return calls > 0 and sum(failed.values()) > calls / 2


def _listed(failed: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in failed.items())


def _no_signal(r: dict) -> str:
    flat = f"no learning signal: {r['flat_groups']:.0%} of the groups scored all their completions alike for {STEPS} steps"
    for kind, what, counts in (("judge", "the judge's verdicts", judge_calls),
                               ("environment", "the environment's tools", tool_calls)):
        calls, failed = counts(r)
        if _mostly_failed(calls, failed):
            return (f"{flat}: {what} failed ({_listed(failed)} of {calls:.0f} calls), not the reward's shape: fix the "
                    f"{kind} (the warnings above name it)")
    return (f"{flat}, so their advantages are 0: make the reward graded or raise {KEY}.method_args.num_generations "
            f"or {KEY}.method_args.temperature")


SIGNALS = (
    Signal("no_signal", lambda r: r.get("flat_groups", 0) > 0.9, _no_signal),
    Signal("cut", lambda r: r.get("cut_fraction", 0) > 0.9,
           lambda r: f"{r['cut_fraction']:.0%} of the completions were cut at max_new_tokens for {STEPS} steps: the "
                     f"rewards score unfinished answers; raise {KEY}.method_args.max_new_tokens or reward answers "
                     f"that end"),
    Signal("kl", lambda r: r.get("kl", 0) > 0.5,
           lambda r: f"the policy's KL to the reference is {r['kl']:.2f} per token for {STEPS} steps: it is drifting "
                     f"far from where it started (a reward being gamed?); raise {KEY}.method_args.kl_coef or lower "
                     f"{KEY}.learning_rate"),
    Signal("ess", lambda r: r.get("rollout_correction_ess", 1) < 0.5,
           lambda r: f"the rollout correction's effective sample size is {r['rollout_correction_ess']:.0%} of the "
                     f"tokens for {STEPS} steps: the policy has moved far from the one that drew its batches "
                     f"({r.get('policy_lag', 0):.0f} steps behind), and a few tokens carry the loss; lower "
                     f"{KEY}.method_args.max_steps_off_policy or {KEY}.learning_rate"),
)


@dataclass
class SignalWatch:
    """Fed every step's record; returns the warnings that became true at that step."""

    held: dict[str, int] = field(default_factory=dict)  # consecutive steps each condition has held
    said: dict[str, str] = field(default_factory=dict)  # each warning given, by its signal: once a run

    def __call__(self, record: dict) -> list[str]:
        new = []
        for signal in SIGNALS:
            self.held[signal.name] = self.held.get(signal.name, 0) + 1 if signal.holds(record) else 0
            if self.held[signal.name] >= STEPS and signal.name not in self.said:
                self.said[signal.name] = signal.message(record)
                new.append(self.said[signal.name])
        return new


@dataclass(frozen=True)
class Service:
    """What a step's rewards depend on and that can fail: an LLM judge's verdicts, an environment's tools."""

    kind: str  # "judge", "environment"
    label: str  # which one: its model and server, its class
    calls: str  # what it is asked, singular: "verdict", "tool call"
    counts: Callable[[dict], tuple[float, dict[str, int]]]  # a step's record -> (calls, failed calls by kind)
    setting: str  # the key bounding the steps in a row whose every call failed
    without: str  # what a run goes on with while it is dead

    @property
    def name(self) -> str:
        return f"the {self.kind} {self.label}"


def judge_service(label: str) -> Service:
    return Service("judge", label, "verdict", judge_calls, f"{KEY}.method_args.judge.max_failed_steps",
                   "nothing judges the completions")


def environment_service(spec: str) -> Service:
    """An agent's environment fails where its tools raise or time out."""
    return Service("environment", spec, "tool call", tool_calls,
                   f"{KEY}.method_args.tool_max_failed_steps", "the model learns from error replies")


@dataclass
class FailureWatch:
    """Fed every step's record and one failed call of this rank's, if any: a warning for each step
    where more than half of the service's calls failed, and `dead()` once every call failed for
    `max_failed_steps` steps in a row (every rank reads the same record: they stop together)."""

    service: Service
    max_failed_steps: int
    dead_steps: int = 0  # steps in a row whose every call failed

    def __call__(self, record: dict, a_failure: str | None) -> list[str]:
        calls, failed = self.service.counts(record)
        self.dead_steps = self.dead_steps + 1 if calls and sum(failed.values()) >= calls else 0
        if not _mostly_failed(calls, failed):
            return []
        return [f"{self.service.name}: {sum(failed.values())} of {calls:.0f} {self.service.calls}s failed at step "
                f"{record.get('step')} ({_listed(failed)})" + (f"; one of them: {a_failure}" if a_failure else "")]

    def dead(self) -> str | None:
        if self.dead_steps < self.max_failed_steps:
            return None
        return (f"{self.service.name} failed every {self.service.calls} for {self.dead_steps} steps in a row "
                f"({self.service.setting}={self.max_failed_steps}): {self.service.without}; fix the {self.service.kind} and "
                f"restart, the run resumes from this step")


def service_watches(judge, judge_failure: Callable[[object], str | None], options) -> list[tuple[FailureWatch, Callable]]:
    """The services a GRPO run's rewards depend on, each with a way to this rank's newest failure of it
    (given the step's experience): first the judge (`judge`: its settings, or None), whose failures are
    why the groups are flat, then an agent's environment (`options.environment`)."""
    watches = []
    if judge is not None:
        watches.append((FailureWatch(judge_service(judge.label), judge.max_failed_steps), judge_failure))
    if options.environment:
        watches.append((FailureWatch(environment_service(options.environment), options.tool_max_failed_steps),
                        a_tool_failure))
    return watches


def a_tool_failure(step) -> str | None:
    """The step's first failed tool call or environment reset (an agent's trajectories; `step` a MethodStep)."""
    return next((c.trace.failure for c in step.state.flat() if c.trace.failure), None)
