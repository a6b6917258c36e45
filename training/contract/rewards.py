"""Reward functions: built-in checks and a user's own, with TRL's signature

    fn(prompts, completions, **columns) -> list[float]

`prompts` as the rows give them (text, or chat messages); `completions` as strings for text prompts
and as `[{"role": "assistant", "content": ...}]` for chat prompts; every other column of the rows
as a keyword list (a function gets the columns it names, or all of them with **kwargs).

A reward is named in `method_args.rewards` as a built-in (`math_verify`, `exact_match`, `format`),
a file (`path/to/rewards.py:function`, relative to the working directory) or a module
(`package.module:function`). The launcher's dry run loads and checks each one (`check_rewards`);
the trainer runs them in a process of their own beside the training (training.rl.reward_pool), each
call with a timeout. Torch-free: the launcher imports this module.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from training.contract.errors import ConfigError

BUILT_IN = ("math_verify", "exact_match", "format")
DEFAULT_REWARDS = ["math_verify"]  # method_args.rewards left unset
REFERENCE_COLUMNS = ("ground_truth", "answer", "solution")  # verl's reward_model.ground_truth, GSM8K's answer


class RewardError(RuntimeError):
    """A reward function failed at run time: one line naming it, the row and what went wrong."""


@dataclass(frozen=True)
class RewardOptions:
    """What the built-ins read (the method's keys): the reference answer's column (None: the first
    of REFERENCE_COLUMNS a row has) and `format`'s regular expression."""

    answer_key: str | None = None
    format_pattern: str = r"<think>.*?</think>"


# --- the built-ins -----------------------------------------------------------------------------------

def completion_text(completion) -> str:
    """A completion as text: a string, or the content of chat messages (TRL's assistant message list)."""
    if isinstance(completion, str):
        return completion
    return "".join(message.get("content") or "" for message in completion)


def reference_answer(columns: dict[str, list], row: int, options: RewardOptions) -> str:
    keys = (options.answer_key,) if options.answer_key else REFERENCE_COLUMNS
    for key in keys:
        if key in columns:
            return str(columns[key][row])
    raise RewardError(f"no reference answer: the rows have none of the columns {', '.join(keys)} "
                      f"(set method_args.answer_key to the column that holds it)")


def gsm8k_answer(reference: str) -> str:
    """GSM8K's answers end in '#### 42' after the worked solution: the number after it."""
    return reference.rsplit("####", 1)[1].strip().replace(",", "") if "####" in reference else reference


def math_verify(prompts, completions, options: RewardOptions, **columns) -> list[float]:
    """1.0 where math-verify finds the completion's answer equal to the reference, else 0.0."""
    from math_verify import parse, verify

    scores = []
    for row, completion in enumerate(completions):
        gold = parse(f"${gsm8k_answer(reference_answer(columns, row, options))}$")
        scores.append(float(bool(gold) and verify(gold, parse(completion_text(completion)))))
    return scores


def exact_match(prompts, completions, options: RewardOptions, **columns) -> list[float]:
    """1.0 where the completion, stripped, is the reference answer (GSM8K's: its number)."""
    return [float(completion_text(c).strip() == gsm8k_answer(reference_answer(columns, row, options)).strip())
            for row, c in enumerate(completions)]


def format_reward(prompts, completions, options: RewardOptions, **columns) -> list[float]:
    """1.0 where `format_pattern` occurs in the completion (re.search, `.` matching newlines too)."""
    pattern = re.compile(options.format_pattern, re.DOTALL)
    return [float(pattern.search(completion_text(c)) is not None) for c in completions]


BUILT_INS: dict[str, Callable] = {"math_verify": math_verify, "exact_match": exact_match, "format": format_reward}


# --- loading and checking --------------------------------------------------------------------------

def load_reward(spec: str, key: str = "method_args.rewards") -> Callable:
    """The function `spec` names: a built-in, `path/to/file.py:function` or `package.module:function`.
    A missing file, module or function is a one-line ConfigError naming it."""
    if spec in BUILT_INS:
        return BUILT_INS[spec]
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"{key}: {spec!r} is neither a built-in reward ({', '.join(BUILT_IN)}) nor "
                          f"'path/to/file.py:function' or 'package.module:function'")
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise ConfigError(f"{key}: the file {where} of {spec!r} does not exist (paths are relative to the "
                              f"directory the job runs in)")
        module_name = f"reward_functions_{abs(hash(str(path)))}"
        if module_name not in sys.modules:
            loader = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            try:
                loader.loader.exec_module(module)
            except Exception as e:
                del sys.modules[module_name]
                raise ConfigError(f"{key}: importing {where} failed: {type(e).__name__}: {e}") from None
        module = sys.modules[module_name]
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise ConfigError(f"{key}: cannot import the module {where} of {spec!r} ({e}): install it, or name "
                              f"a file as path/to/file.py:{name}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"{key}: {where} has no function {name!r}")
    return fn


def accepted_columns(fn: Callable, columns: set[str]) -> set[str] | None:
    """The columns `fn` takes as keywords (None: all of them, it has **kwargs)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.name in columns}


def check_reward(spec: str, columns: set[str] | None, key: str = "method_args.rewards") -> Callable:
    """Load `spec` and check that it can be called as the trainer calls it: keywords `prompts`,
    `completions` and the data's columns (None: not known here, e.g. a hub dataset). A parameter it
    needs that the rows lack is one line."""
    fn = load_reward(spec, key)
    if spec in BUILT_INS:
        return fn
    params = inspect.signature(fn).parameters.values()
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
    for name in ("prompts", "completions"):
        if not takes_all and name not in {p.name for p in params}:
            raise ConfigError(f"{key}: {spec} has no parameter {name!r}: reward functions are called as "
                              f"fn(prompts, completions, **columns) (TRL's signature)")
    for p in params:
        required = p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)
        if required and columns is not None and p.name not in ("prompts", "completions", *columns):
            raise ConfigError(f"{key}: {spec} needs the parameter {p.name!r}, which is no column of the data "
                              f"(columns: {', '.join(sorted(columns)) or 'none'}): give it a default or add the column")
    return fn


def check_rewards(specs: list[str], weights: list[float] | None, columns: set[str] | None) -> None:
    """The dry run's check of `method_args.rewards` and `reward_weights`, before anything is written."""
    if not specs:
        raise ConfigError("method_args.rewards is empty: name at least one reward function, e.g. [math_verify]")
    if weights is not None and len(weights) != len(specs):
        raise ConfigError(f"method_args.reward_weights has {len(weights)} weights for {len(specs)} rewards "
                          f"({', '.join(specs)}): give one weight per reward function")
    for i, spec in enumerate(specs):
        check_reward(spec, columns, f"method_args.rewards[{i}]")


# --- running ------------------------------------------------------------------------------------------

def metric_names(specs: list[str]) -> list[str]:
    """Each reward's name in the step's metrics (`reward_<name>`): its function's name, as TRL names
    them, whatever path the spec took to reach the pod; the whole spec where two functions share one."""
    names = [spec.rsplit(":", 1)[-1] for spec in specs]
    return [name if names.count(name) == 1 else spec for name, spec in zip(names, specs)]


def located(spec: str, bases: tuple[Path, ...]) -> str:
    """A file's spec with its path made absolute from the first of `bases` that holds it (as it is
    where none does: the error then names it as given)."""
    where, _, name = spec.rpartition(":")
    if not where.endswith(".py") or Path(where).is_absolute():
        return spec
    return next((f"{(base / where).resolve()}:{name}" for base in bases if (base / where).is_file()), spec)


def absolute(spec: str) -> str:
    """A file's spec with its path made absolute: the pool's process may run elsewhere."""
    where, _, name = spec.rpartition(":")
    return f"{Path(where).resolve()}:{name}" if where.endswith(".py") else spec


def call_reward(spec: str, options: RewardOptions, prompts: list, completions: list, columns: dict[str, list]):
    """One call as the trainer makes it (in the pool's process): the function's own scores, unchecked."""
    fn = load_reward(spec)
    if spec in BUILT_INS:
        return fn(prompts, completions, options, **columns)
    taken = accepted_columns(fn, set(columns))
    given = columns if taken is None else {k: v for k, v in columns.items() if k in taken}
    return fn(prompts=prompts, completions=completions, **given)
