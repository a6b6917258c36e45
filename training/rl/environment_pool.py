"""An agent's environments (training.contract.environments) live in the rank's reward process
(training.rl.reward_pool): one instance per trajectory, started from its data row, called as tools
between the model's turns, and read by the reward functions that take `environments` (as TRL passes
them) in the same process, never copied. A hanging tool never blocks the training process's
signal handling, and the process goes with its rank.

Each request (a group's resets, a turn's tool calls) runs on a thread of that process and is collected
when done (`begin`, `finished`), so the process stays free: one group's tools run while the trainer
generates another group's turn. A turn's tool calls run concurrently across trajectories (at most
`max_concurrency` at once over the rank, each in a thread of its own: tools that wait on a sandbox or
a service overlap), one trajectory's calls in the order the model made them. A call to an unknown
tool, with arguments that do not fit, or that raises becomes an error reply the model reads; a call
past `tool_timeout` ends its trajectory (its thread is left behind, the environment no longer used).
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from training.contract.environments import load_environment, tool_methods
from training.contract.rewards import call_reward, taken
from training.contract.tool_calls import ToolCall
from training.contract.tool_template import ToolReply, reply_content

Key = tuple[int, int, int]  # (sample id, completion index, step): a trajectory

# --- in the reward process ---
_live: dict[Key, object] = {}
_slots: dict[int, threading.BoundedSemaphore] = {}
_requests: dict[int, Future] = {}


def begin(ticket: int, fn: Callable, *args) -> None:
    """`fn(*args)` on a thread of this process, collected by `finished(ticket)`; returns at once."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001 - the user's environment failed outside a tool call
            future.set_exception(e)

    _requests[ticket] = future
    threading.Thread(target=run, daemon=True).start()


def finished(tickets: list[int]) -> dict[int, tuple[str | None, object]]:
    """Those of the requests that are done, as (error or None, result), forgotten here."""
    done = {}
    for ticket in tickets:
        future = _requests.get(ticket)
        if future is not None and future.done():
            del _requests[ticket]
            error = future.exception()
            done[ticket] = (f"{type(error).__name__}: {error}", None) if error else (None, future.result())
    return done


def start_episodes(spec: str, episodes: list[tuple[Key, dict, int]]) -> list[str | None]:
    """A fresh environment per trajectory, `reset` with its row's columns (and `seed` where it takes
    one); each one's first observation, or None."""
    cls = load_environment(spec)
    observations = []
    for key, columns, seed in episodes:
        environment = cls()
        observation = environment.reset(**taken(environment.reset, {**columns, "seed": seed}))
        _live[key] = environment
        observations.append(None if observation is None else reply_content(observation))
    return observations


def call_tools(batch: list[tuple[Key, list[ToolCall]]], timeout_s: float, max_concurrency: int) -> list[list[tuple]]:
    """Each trajectory's calls, in order; (reply, seconds) per call made. A timeout is its trajectory's last."""
    slots = _slots.setdefault(max_concurrency, threading.BoundedSemaphore(max_concurrency))
    results: list[list[tuple]] = [[] for _ in batch]

    def run(i: int, key: Key, calls: list[ToolCall]) -> None:
        for call in calls:
            started = time.perf_counter()
            reply = _call(_live[key], call, timeout_s, slots)
            results[i].append((reply, time.perf_counter() - started))
            if reply.status == "timeout":
                break

    threads = [threading.Thread(target=run, args=(i, key, calls), daemon=True) for i, (key, calls) in enumerate(batch)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _call(environment, call: ToolCall, timeout_s: float, slots: threading.BoundedSemaphore) -> ToolReply:
    tools = tool_methods(type(environment))
    if call.error:
        return ToolReply(call.name, f"Error: the tool call could not be read: {call.error}", "error")
    if call.name not in tools:
        return ToolReply(call.name, f"Error: there is no tool {call.name!r}; the tools are {', '.join(sorted(tools))}",
                         "error")
    method = getattr(environment, call.name)
    try:
        inspect.signature(method).bind(**call.arguments)
    except TypeError as e:
        return ToolReply(call.name, f"Error: {call.name} cannot take these arguments: {e}", "error")
    outcome: dict = {}

    def invoke() -> None:
        try:
            outcome["value"] = method(**call.arguments)
        except Exception as e:  # noqa: BLE001 - the model reads what went wrong, as agents do
            outcome["error"] = f"{type(e).__name__}: {e}"

    with slots:
        thread = threading.Thread(target=invoke, daemon=True)
        thread.start()
        thread.join(timeout_s)
    if thread.is_alive():
        return ToolReply(call.name, f"Error: {call.name} took more than {timeout_s:g} s", "timeout")
    if "error" in outcome:
        return ToolReply(call.name, f"Error: {outcome['error']}", "raised")
    return ToolReply(call.name, reply_content(outcome.get("value")))


def score(spec: str, options, prompts, completions, columns, extras: dict, keys: list[Key]):
    """A reward function's call with the trajectories' environments beside the usual arguments."""
    return call_reward(spec, options, prompts, completions, columns, {**extras, "environments": [_live[k] for k in keys]})


def release(keys: list[Key]) -> None:
    for key in keys:
        _live.pop(key, None)


# --- in the training process ---
class Environments:
    """The rank's environments, reached through its reward pool's process: `start` and `call` return a
    ticket at once, `finished` says which tickets are done and what they returned."""

    def __init__(self, spec: str, pool, tool_timeout: float, max_concurrency: int):
        self.spec, self.pool, self.tool_timeout, self.max_concurrency = spec, pool, tool_timeout, max_concurrency
        self._tickets = itertools.count()

    def _begin(self, fn: Callable, *args) -> int:
        ticket = next(self._tickets)
        self.pool.run(begin, ticket, fn, *args)  # the process takes requests in order: `finished` comes after
        return ticket

    def start(self, episodes: list[tuple[Key, dict, int]]) -> int:
        return self._begin(start_episodes, self.spec, episodes)

    def call(self, batch: list[tuple[Key, list[ToolCall]]]) -> int:
        return self._begin(call_tools, batch, self.tool_timeout, self.max_concurrency)

    def finished(self, tickets: list[int]) -> Future:
        """A future of `finished(tickets)` in the process."""
        return self.pool.run(finished, tickets)

    def release(self, keys: list[Key]) -> None:
        if keys:
            self.pool.run(release, keys)
