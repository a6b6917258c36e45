"""When a GRPO run cannot learn, said while it runs: each step's record watched for the three ways
a run burns compute without learning, each said once, naming the key to change.

- No signal: a group whose completions all scored alike has zero advantage (training.rl.algorithms),
  so when nearly every group is flat the step teaches nothing.
- Cut completions: when nearly every completion ends at max_new_tokens, the reward scores unfinished
  answers and the model learns to fill the budget.
- Runaway KL: the policy far from the reference, step after step (a reward being gamed, or a learning
  rate too high for the task).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

KEY = "training_config.training_args"
STEPS = 3  # consecutive steps a condition holds before it is said


@dataclass(frozen=True)
class Signal:
    name: str
    holds: Callable[[dict], bool]  # of a step's record
    message: Callable[[dict], str]


SIGNALS = (
    Signal("no_signal", lambda r: r.get("flat_groups", 0) > 0.9,
           lambda r: f"no learning signal: {r['flat_groups']:.0%} of the groups scored all their completions alike "
                     f"for {STEPS} steps, so their advantages are 0: make the reward graded or raise "
                     f"{KEY}.method_args.num_generations or {KEY}.method_args.temperature"),
    Signal("cut", lambda r: r.get("cut_fraction", 0) > 0.9,
           lambda r: f"{r['cut_fraction']:.0%} of the completions were cut at max_new_tokens for {STEPS} steps: the "
                     f"rewards score unfinished answers; raise {KEY}.method_args.max_new_tokens or reward answers "
                     f"that end"),
    Signal("kl", lambda r: r.get("kl", 0) > 0.5,
           lambda r: f"the policy's KL to the reference is {r['kl']:.2f} per token for {STEPS} steps: it is drifting "
                     f"far from where it started (a reward being gamed?); raise {KEY}.method_args.kl_coef or lower "
                     f"{KEY}.learning_rate"),
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
