"""An agent's rollouts: multi-turn, with tools, token in and token out (`method_args.environment`).

Each of a group's `n` trajectories gets its own environment (training.rl.environment_pool), started
from the prompt's row with a seed from (seed, sample id, completion index, step). Then, turn by turn:
the model generates until it ends its turn; its tool calls are read in its family's format
(training.contract.tool_calls); the environment runs them; each reply is rendered as the chat
template's tool turn, tokenized alone and appended (training.contract.tool_template); until a turn
calls nothing, `max_turns`, or `max_total_tokens`. The model's tokens carry the loss, the replies'
none (the completion's `loss_mask`).

The sampler generates one group's turn at a time; while a group waits for its environments (resets,
tool calls), another group's turn is generated, and a new group starts only when every started one is
waiting: tools run beside generation. Every turn's draws come from (seed, sample id, completion index,
step, turn), and a group's turns are generated apart from other groups: the first turn as one batch of
the group's rows (they share the prompt), later turns row by row. So with a deterministic environment
a trajectory is the same at any world size, in any company, in any order of the groups, and after a
resize that redraws its step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

import torch

from training.contract.rewards import RewardError
from training.contract.tool_template import ToolTemplate
from training.rl.environment_pool import Environments
from training.rl.rollout import Completion, PromptGroup, ShardedModelRollout, never
from training.rl.sampling import SamplingParams, completion_generator, completion_seed

ENDINGS = ("answer", "max_turns", "max_total_tokens", "tool_timeout", "cut")
POLL_S = 0.01  # between looks at the environments' requests while no group can generate


@dataclass
class Trace:
    """What one trajectory did, for its metrics and the rollout samples."""

    key: tuple[int, int, int] = (0, 0, 0)  # its environment's (sample id, completion index, step)
    turns: list[dict] = field(default_factory=list)  # {"model": text, "calls": [...], "replies": [...]}
    calls: dict[str, int] = field(default_factory=dict)  # by tool
    errors: int = 0  # calls answered with an error the model read
    raised: int = 0  # of them, calls where the tool itself raised
    timeouts: int = 0
    failure: str | None = None  # its first call that raised or timed out, as the model read it
    ended: str = ""  # one of ENDINGS
    environment_s: float = 0.0  # its tools' own time


@dataclass
class Trajectory:
    prompt_ids: tuple[int, ...]
    tokens: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    last_turn: list[int] = field(default_factory=list)
    stopped: bool = False

    @property
    def context(self) -> tuple[int, ...]:
        return self.prompt_ids + tuple(self.tokens)

    def said(self, tokens: list[int], stopped: bool, log_probs: list) -> None:
        self.tokens += tokens
        self.loss_mask += [1] * len(tokens)
        self.log_probs += [math.nan if lp is None else lp for lp in log_probs]
        self.last_turn, self.stopped = tokens, stopped

    def heard(self, ids: list[int]) -> None:
        self.tokens += ids
        self.loss_mask += [0] * len(ids)
        self.log_probs += [math.nan] * len(ids)


class AgentRollout:
    """The RolloutEngine of an agent: the trainer's own sampler, turn by turn, with the environments."""

    def __init__(self, sampler: ShardedModelRollout, environments: Environments, template: ToolTemplate, tokenizer,
                 max_turns: int, max_total_tokens: int, prompt_limit: int):
        self.sampler, self.environments, self.template, self.tokenizer = sampler, environments, template, tokenizer
        self.max_turns, self.max_total_tokens, self.prompt_limit = max_turns, max_total_tokens, prompt_limit
        self.tool_names = [t["function"]["name"] for t in template.tools]
        self.seed = sampler.seed
        self.environment_s = 0.0  # the last rollout's wait for its environments

    @property
    def sync_s(self) -> float:
        return self.sampler.sync_s

    def close(self) -> None:
        self.sampler.close()

    def step_sums(self, traces: list[Trace], environment_s: float) -> dict:
        """This rank's sums of a step's trajectories by name (summed over ranks by the trainer): turns,
        calls (and per tool), errors and timeouts, how they ended, and the wait for the environments."""
        return {"turns": sum(len(t.turns) for t in traces), "tool_calls": sum(sum(t.calls.values()) for t in traces),
                "tool_errors": sum(t.errors for t in traces), "tool_raised": sum(t.raised for t in traces),
                "tool_timeouts": sum(t.timeouts for t in traces),
                "ended_max_turns": sum(t.ended == "max_turns" for t in traces),
                "ended_max_total_tokens": sum(t.ended == "max_total_tokens" for t in traces),
                "environment_s": environment_s,
                **{f"tool_calls:{name}": sum(t.calls.get(name, 0) for t in traces) for name in self.tool_names}}

    def step_metrics(self, sums: dict[str, float], trajectories: float, ranks: int) -> dict:
        """From step_sums summed over ranks: per trajectory, turns and calls (and per tool); the counts
        of errors and timeouts; the share ended by max_turns or max_total_tokens; the ranks' mean wait."""
        return {"turns_mean": sums["turns"] / trajectories, "tool_calls_mean": sums["tool_calls"] / trajectories,
                **{f"tool_calls_{name}": sums[f"tool_calls:{name}"] / trajectories for name in self.tool_names},
                **{key: sums[key] for key in ("tool_calls", "tool_errors", "tool_raised", "tool_timeouts")},
                "ended_max_turns": sums["ended_max_turns"] / trajectories,
                "ended_max_total_tokens": sums["ended_max_total_tokens"] / trajectories,
                "environment_s": sums["environment_s"] / ranks}

    def generate(self, groups: list[PromptGroup], n: int, params: SamplingParams, step: int,
                 interrupted: Callable[[], bool] = never):
        """Each group's completions, in the groups' order; stops early once `interrupted()`."""
        self.environment_s = 0.0
        runs = [self._group(group, n, params, step, interrupted) for group in groups]  # generators, not started
        started, ready, waiting, done, given = 0, {}, {}, {}, 0  # ready: group -> the answer it waited for
        with self.sampler.session():
            while given < len(groups):
                if waiting:  # what the environments finished, without waiting
                    if (answers := self._wait(self.environments.finished(list(waiting)), interrupted)) is None:
                        return
                    for ticket, (error, answer) in answers.items():
                        group, what = waiting.pop(ticket)
                        if error:
                            raise RewardError(f"environment {what} raised {error}")
                        ready[group] = answer
                if not ready and started < len(groups):
                    ready[started], started = None, started + 1
                if not ready:  # every started group waits for its environments
                    idle = time.perf_counter()
                    if interrupted():
                        return
                    time.sleep(POLL_S)
                    self.environment_s += time.perf_counter() - idle
                    continue
                group = min(ready)
                try:
                    ticket, what = runs[group].send(ready.pop(group))
                    waiting[ticket] = (group, what)
                except StopIteration as end:
                    if end.value is None:  # interrupted in a model turn
                        return
                    done[group] = end.value
                while given in done:
                    yield done.pop(given)
                    given += 1

    def _group(self, group: PromptGroup, n: int, params: SamplingParams, step: int,
               interrupted: Callable[[], bool]):
        """One group's trajectories, as a generator: it yields (ticket, what) for each request to the
        environments and is sent its answer; it returns the completions (None once interrupted)."""
        keys = [(group.sample_id, i, step) for i in range(n)]
        messages, columns = group.episode["prompt"], group.episode["columns"]
        observations = yield (self.environments.start(
            [(key, columns, completion_seed(self.seed, group.sample_id, i, step)) for i, key in enumerate(keys)]),
            f"{self.environments.spec} reset on sample {group.sample_id}")
        trajectories = [Trajectory(group.prompt_ids if o is None else tuple(self.template.prompt_ids(
            _with_observation(messages, o)))) for o in observations]
        if (longest := max(len(t.prompt_ids) for t in trajectories)) > self.prompt_limit:
            raise RewardError(f"environment {self.environments.spec}: its first observation makes sample "
                              f"{group.sample_id}'s prompt {longest} tokens, over method_args.max_prompt_length="
                              f"{self.prompt_limit}: raise it or shorten what reset returns")
        for t, key in zip(trajectories, keys):
            t.trace.key = key
        active = list(range(n))
        for turn in range(self.max_turns):
            if not self._model_turn(group, trajectories, active, params, step, turn, interrupted):
                return None
            calling = self._calls(trajectories, active, last_turn=turn == self.max_turns - 1)
            if not calling:
                break
            results = yield (self.environments.call([(keys[r], calls) for r, calls in calling]),
                             f"{self.environments.spec}'s tools on sample {group.sample_id}")
            active = [r for (r, calls), replies in zip(calling, results) if self._replied(trajectories[r], calls, replies)]
            if not active:
                break
        return [Completion(group.sample_id, i, tuple(t.tokens), t.trace.ended == "answer",
                           tuple(t.log_probs) if params.log_probs else (), tuple(t.loss_mask),
                           t.prompt_ids if t.prompt_ids != group.prompt_ids else None, t.trace)
                for i, t in enumerate(trajectories)]

    def _model_turn(self, group, trajectories, active, params, step, turn, interrupted) -> bool:
        """The model's turn on every active trajectory: rows that share their context (a group's first
        turn) as one batch, the others each alone."""
        sharing: dict[tuple[int, ...], list[int]] = {}
        for r in active:
            sharing.setdefault(trajectories[r].context, []).append(r)
        for context, rows in sharing.items():
            room = self.max_total_tokens - len(trajectories[rows[0]].tokens)
            generators = [completion_generator(self.seed, group.sample_id, r, step, turn) for r in rows]
            drawn = self.sampler.sample(torch.tensor(context, device=self.sampler.device), generators, params,
                                        min(params.max_new_tokens, room), interrupted)
            if drawn is None:
                return False
            for r, (tokens, stopped, log_probs) in zip(rows, drawn):
                trajectories[r].said(tokens, stopped, log_probs)
        return True

    def _calls(self, trajectories, active, last_turn: bool) -> list[tuple[int, list]]:
        """The active trajectories' tool calls of the turn just generated; the others end here."""
        calling = []
        for r in active:
            t = trajectories[r]
            spoken = t.last_turn[:-1] if t.stopped else t.last_turn  # the stop token is no part of a call
            before = t.context[:len(t.context) - len(t.last_turn)]
            calls = self.template.calls(self.tokenizer.decode(spoken, skip_special_tokens=False), before)
            t.trace.turns.append({"model": self.tokenizer.decode(spoken, skip_special_tokens=True),
                                  "calls": [{"name": c.name, "arguments": c.arguments} for c in calls]})
            if not t.stopped:
                t.trace.ended = "max_total_tokens" if len(t.tokens) >= self.max_total_tokens else "cut"
            elif not calls:
                t.trace.ended = "answer"
            elif last_turn:
                t.trace.ended = "max_turns"
            else:
                calling.append((r, calls))
        return calling

    def _replied(self, t: Trajectory, calls: list, results: list[tuple]) -> bool:
        """The tools' replies appended to the trajectory; False where it ends here."""
        replies = [reply for reply, _ in results]
        t.trace.turns[-1]["replies"] = [{"name": r.name, "content": r.content, "status": r.status} for r in replies]
        for reply, seconds in results:
            t.trace.calls[reply.name] = t.trace.calls.get(reply.name, 0) + 1
            t.trace.errors += reply.status in ("error", "raised")
            t.trace.raised += reply.status == "raised"
            t.trace.timeouts += reply.status == "timeout"
            if reply.status in ("raised", "timeout") and t.trace.failure is None:
                t.trace.failure = f"{reply.name}: {reply.content}"
            t.trace.environment_s += seconds
        if t.trace.timeouts:
            t.trace.ended = "tool_timeout"
            return False
        stop_text = self.tokenizer.decode(t.last_turn[-1:], skip_special_tokens=False)
        ids = self.template.reply_ids(calls, replies, stop_text)
        if len(t.tokens) + len(ids) >= self.max_total_tokens:  # no room left for the model to answer
            t.trace.ended = "max_total_tokens"
            return False
        t.heard(ids)
        return True

    def _wait(self, future: Future, interrupted: Callable[[], bool]):
        """The reward process's answer; None once `interrupted()` (the caller ends the pool's process)."""
        started = time.perf_counter()
        while not future.done():
            if interrupted():
                return None
            wait([future], timeout=POLL_S)
        self.environment_s += time.perf_counter() - started
        return future.result()


def _with_observation(messages, observation: str):
    """The prompt with the environment's first observation appended to its last user message (TRL's)."""
    if isinstance(messages, str):
        return messages + observation
    messages = [dict(m) for m in messages]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        return messages + [{"role": "user", "content": observation}]
    messages[last]["content"] = f"{messages[last].get('content') or ''}{observation}"
    return messages
