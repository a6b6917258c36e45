"""The trainer's reward functions (training.contract.rewards) in a process of their own: a slow or
hanging function never blocks the training process's signal handling, and its timeout can end it.
An LLM judge among them (`judge`, training.rl.judge) runs in this process's own threads instead: its
calls wait on the network, and its verdicts are kept with the checkpoint."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context

from training.contract.errors import ConfigError
from training.contract.judge import NAME as JUDGE
from training.contract.rewards import (RewardError, RewardOptions, absolute, call_reward, completion_text,
                                       reference_or_none)
from training.runtime.elastic import signal_mask_kept


PER_COMPLETION = ("completion_ids", "environment_keys")  # extras with one entry per completion


def _bad_score(value) -> str | None:
    if value is None:  # TRL's "not applicable": the other functions score that completion
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return repr(value)
    return None


def _worker_start(parent: int) -> None:
    from training.runtime.elastic import die_with_parent

    die_with_parent(parent)  # a rank that is killed, however, takes its reward process with it


@dataclass
class Scoring:
    """One call of every reward function on some completions, in flight in the pool."""

    futures: dict[str, Future]  # by the function's spec
    call: tuple  # (prompts, completions, columns, sample_ids, extras)


class RewardPool:
    """The reward functions of a run, each call in the pool's process. Scores are checked: a function
    that raises, times out, returns the wrong length or a None/NaN score ends the run with one line
    naming it and the row's sample id. A None score (TRL's "not applicable") is left out of the
    weighted sum; a completion no function scores ends the run too."""

    def __init__(self, specs: list[str], weights: list[float] | None, options: RewardOptions, timeout_s: float):
        self.specs, self.options, self.timeout_s = list(specs), options, timeout_s
        self.weights = list(weights) if weights is not None else [1.0] * len(specs)
        self.judge = None  # training.rl.judge.Judge where `judge` is one of the specs (the method sets it)
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: never a fork of a process that holds threads and a process group; and the worker is the
            # rank's own child, so the kernel's parent-death signal reaches it (a forkserver's child would be
            # the forkserver's, which outlives a killed rank, as do its children)
            self._pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_worker_start,
                                             initargs=(os.getpid(),))
        return self._pool

    def run(self, fn: Callable, *args) -> Future:
        """`fn(*args)` in the pool's process (an agent's environments live there: training.rl.environment_pool)."""
        with signal_mask_kept():  # a submit may start the pool's process
            return self._executor().submit(fn, *args)

    def score(self, prompts: list, completions: list, columns: dict[str, list], sample_ids: list[int],
              extras: dict | None = None) -> tuple[list[float], dict[str, list[float | None]]]:
        """(weighted total per completion, each function's own scores by its name)."""
        return self.collect(self.submit(prompts, completions, columns, sample_ids, extras))

    def submit(self, prompts: list, completions: list, columns: dict[str, list], sample_ids: list[int],
               extras: dict | None = None) -> Scoring:
        """Start scoring (every function, one call each); `collect` waits for and checks the scores.
        `extras`: TRL's `completion_ids` (one per completion) and `trainer_state`."""
        return Scoring({spec: self._submit(spec, prompts, completions, columns, extras) for spec in self.specs},
                       (prompts, completions, columns, sample_ids, extras))

    def collect(self, scoring: Scoring, interrupted: Callable[[], bool] | None = None):
        """The scores of `submit`, as `score` returns them; None once `interrupted()` is true (the
        calls in flight are dropped with the pool's process)."""
        per_function = {}
        for spec, future in scoring.futures.items():
            started = time.monotonic()  # a judge's calls are bounded by their own timeouts and retries
            deadline = started + (math.inf if spec == JUDGE else self.timeout_s)
            while not future.done() and time.monotonic() < deadline:
                if interrupted is not None and interrupted():
                    self.close(kill=True)
                    return None
                wait([future], timeout=min(0.05, max(deadline - time.monotonic(), 0)))
            if spec == JUDGE:
                self.judge.waited(time.monotonic() - started, judge_step(scoring.call[4]))
                per_function[spec] = self._judged(future.result(), scoring.call[3])
            else:
                per_function[spec] = self._checked(spec, future, *scoring.call)
        totals = []
        for i, sample_id in enumerate(scoring.call[3]):
            scored = [w * scores[i] for w, scores in zip(self.weights, per_function.values()) if scores[i] is not None]
            if not scored:
                raise RewardError(f"no reward function scored sample {sample_id} (completion {i} of the call): "
                                  f"{', '.join(self.specs)} each returned None for it; one of them must score it")
            totals.append(sum(scored))  # NaN where the judge's verdict failed and is dropped
        return totals, per_function

    def _judged(self, verdicts: list, sample_ids: list[int]) -> list[float]:
        """The judge's scores: a failed verdict as `on_failure` says (drop: NaN, which leaves the
        completion out of its group's advantage; zero: 0.0; stop: the run ends). Refused credentials
        end the run whatever it says."""
        settings, scores = self.judge.settings, []
        for verdict, sample_id in zip(verdicts, sample_ids):
            if verdict.failure and verdict.failure.startswith("refused"):
                raise RewardError(f"judge {settings.model_id} {verdict.failure.replace(':', ' the credentials:', 1)} "
                                  f"(sample {sample_id}): check method_args.judge.api_key_env and its Secret, or the "
                                  f"pods' AWS role; the last checkpoint is kept")
            if verdict.failure and settings.on_failure == "stop":
                raise RewardError(f"judge {settings.model_id}: {verdict.failure} on sample {sample_id}, after "
                                  f"{settings.num_retries} retries (method_args.judge.on_failure=stop); the last "
                                  f"checkpoint is kept")
            scores.append(verdict.score if not verdict.failure else math.nan if settings.on_failure == "drop" else 0.0)
        return scores

    def _submit(self, spec, prompts, completions, columns, extras):
        if spec == JUDGE:
            return self.judge.submit(prompts, [completion_text(c) for c in completions], columns,
                                     lambda row: reference_or_none(columns, row, self.options), judge_step(extras))
        if extras and "environment_keys" in extras:
            from training.rl.environment_pool import score

            rest = {k: v for k, v in extras.items() if k != "environment_keys"}
            return self.run(score, absolute(spec), self.options, prompts, completions, columns, rest,
                            extras["environment_keys"])
        return self.run(call_reward, absolute(spec), self.options, prompts, completions, columns, extras)

    def _checked(self, spec, future, prompts, completions, columns, sample_ids, extras) -> list[float | None]:
        if not future.done():
            self.close(kill=True)
            raise RewardError(f"reward function {spec} took more than method_args.reward_timeout="
                              f"{self.timeout_s:g} s on samples {_ids(sample_ids)}: make it faster or raise the "
                              f"timeout")
        try:
            scores = future.result()
        except RewardError as e:
            raise RewardError(f"reward function {spec}: {e}") from None
        except ConfigError:  # the function could not be loaded here: no sample is at fault
            raise
        except Exception as e:  # noqa: BLE001 - the user's function raised: find the row that did
            row = self._failing_row(spec, prompts, completions, columns, extras)
            where = f"sample {sample_ids[row]}" if row is not None else f"samples {_ids(sample_ids)}"
            raise RewardError(f"reward function {spec} raised {type(e).__name__}: {e} on {where}") from None
        if not isinstance(scores, (list, tuple)) or len(scores) != len(completions):
            got = f"{len(scores)} scores" if isinstance(scores, (list, tuple)) else f"a {type(scores).__name__}"
            raise RewardError(f"reward function {spec} returned {got} for {len(completions)} completions "
                              f"(samples {_ids(sample_ids)}): return one float per completion")
        for i, value in enumerate(scores):
            if (bad := _bad_score(value)) is not None:
                raise RewardError(f"reward function {spec} scored sample {sample_ids[i]} (completion {i} of the "
                                  f"call) {bad}: return a finite number, or None where it does not apply")
        return [None if v is None else float(v) for v in scores]

    def _failing_row(self, spec, prompts, completions, columns, extras) -> int | None:
        for row in range(len(completions)):
            one = {k: v[row:row + 1] for k, v in columns.items()}
            own = {k: v[row:row + 1] if k in PER_COMPLETION else v for k, v in extras.items()} if extras else None
            try:
                self._submit(spec, prompts[row:row + 1], completions[row:row + 1], one, own).result(
                    timeout=self.timeout_s)
            except Exception:  # noqa: BLE001 - this row is the one
                return row
        return None

    def close(self, kill: bool = False) -> None:
        """End the pool's process (at once with `kill`: a call that hangs is not waited for)."""
        if self.judge is not None and not kill:
            self.judge.close()
        if self._pool is None:
            return
        if kill:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
        self._pool.shutdown(wait=not kill, cancel_futures=True)
        self._pool = None


def judge_step(extras: dict | None) -> int:
    """The step a call's verdicts are for, as the judge's ledger and account name it: the one being taken."""
    return extras["trainer_state"].global_step + 1 if extras else 0


def _ids(sample_ids: list[int]) -> str:
    shown = ", ".join(map(str, sorted(set(sample_ids))[:5]))
    return shown + (", ..." if len(set(sample_ids)) > 5 else "")
