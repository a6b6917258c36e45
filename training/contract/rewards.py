"""Reward functions: built-in checks and a user's own, with TRL's signature

    fn(prompts, completions, completion_ids, trainer_state, **columns) -> list[float | None]

`completions` as strings for text prompts and as `[{"role": "assistant", "content": ...}]` for chat
prompts; `prompts` as the rows give them (text, or chat messages); `completion_ids` the completions'
token ids; `trainer_state` the step and epoch (TRL's TrainerState fields); every other column of the
rows as a keyword list. A function gets the keywords it names (`completions` at least), or all of
them with **kwargs. A None score is TRL's "not applicable": left out of the weighted sum where
another function scores that completion.

verl's reward functions run as they are: `compute_score(data_source, solution_str, ground_truth,
extra_info=None)` (recognized by its `solution_str` parameter), called once per completion with the
row's `data_source` and `extra_info` columns and its reference answer (verl's `reward_model` column's
`ground_truth`, else the columns the built-ins read); a float, or a dict with a `score`.

A reward is named in `method_args.rewards` as a built-in (`math_verify`, `exact_match`, `format`),
a file (`path/to/rewards.py:function`, relative to the working directory) or a module
(`package.module:function`). The launcher's dry run loads and checks each one (`check_rewards`);
the trainer runs them in a process of their own beside the training (training.rl.reward_pool), each
call with a timeout. Torch-free: the launcher imports this module.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from training.contract.errors import ConfigError

BUILT_IN = ("math_verify", "exact_match", "format")
TRL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state")  # beside the rows' columns
VERL_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
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


@dataclass(frozen=True)
class TrainerState:
    """What a reward function reads of TRL's `trainer_state`."""

    global_step: int  # optimizer steps taken so far
    epoch: float  # passes over the training data so far


# --- the built-ins -----------------------------------------------------------------------------------

def completion_text(completion) -> str:
    """A completion as text: a string, or the content of chat messages (TRL's assistant message list;
    an agent's turns without its tools' replies)."""
    if isinstance(completion, str):
        return completion
    return "".join(message.get("content") or "" for message in completion if message.get("role") != "tool")


def reference_answer(columns: dict[str, list], row: int, options: RewardOptions) -> str:
    keys = (options.answer_key,) if options.answer_key else REFERENCE_COLUMNS
    for key in keys:
        if key in columns:
            return str(columns[key][row])
    model = columns.get("reward_model", [None] * (row + 1))[row]  # verl's rows: {"ground_truth": ..., "style": ...}
    if not options.answer_key and isinstance(model, dict) and "ground_truth" in model:
        return str(model["ground_truth"])
    raise RewardError(f"no reference answer: the rows have none of the columns {', '.join(keys)} "
                      f"(set method_args.answer_key to the column that holds it)")


def reference_or_none(columns: dict[str, list], row: int, options: RewardOptions) -> str | None:
    """The row's reference answer, or None where it has none (an LLM judge's template that needs one
    says so itself)."""
    try:
        return reference_answer(columns, row, options)
    except RewardError:
        return None


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

_LOADING = threading.RLock()  # reentrant: a file being loaded may name another (its environment's rewards)


def load_reward(spec: str, key: str = "method_args.rewards", kind: str = "function") -> Callable:
    """The function (or, with kind="class", the class) `spec` names: a built-in reward,
    `path/to/file.py:name` or `package.module:name`. A missing file, module or name is a one-line
    ConfigError naming it."""
    if kind == "function" and spec in BUILT_INS:
        return BUILT_INS[spec]
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        placeholder = "Class" if kind == "class" else kind
        forms = f"'path/to/file.py:{placeholder}' or 'package.module:{placeholder}'"
        raise ConfigError(f"{key}: {spec!r} is neither a built-in reward ({', '.join(BUILT_IN)}) nor {forms}"
                          if kind == "function" else f"{key}: {spec!r} names no {kind}: write {forms}")
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise ConfigError(f"{key}: the file {where} of {spec!r} does not exist (paths are relative to the "
                              f"directory the job runs in)")
        module_name = f"reward_functions_{abs(hash(str(path)))}"
        with _LOADING:  # threads of one process (an agent's resets) find a file's module whole, run once
            if str(path.parent) not in sys.path:  # a reward file imports the modules that sit beside it
                sys.path.append(str(path.parent))
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
        found = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and inspect.isclass(v) == (kind == "class")]
        near = difflib.get_close_matches(name, found, n=1)
        raise ConfigError(f"{key}: {where} has no {kind} {name!r}"
                          + (f": did you mean {near[0]!r}?" if near else f" (it has {', '.join(found) or 'none'})"))
    return fn


def is_verl(fn: Callable) -> bool:
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info=None)`, one completion a call."""
    return "solution_str" in inspect.signature(fn).parameters


def taken(fn: Callable, keywords: dict) -> dict:
    """The keywords `fn` names (all of them where it has **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return keywords
    return {k: v for k, v in keywords.items() if k in params}


def check_reward(spec: str, columns: set[str] | None, key: str = "method_args.rewards") -> Callable:
    """Load `spec` and check that it can be called as the trainer calls it: TRL's keywords (at least
    `completions`) and the data's columns, or verl's (None: the columns are not known here, e.g. a
    hub dataset). A parameter it needs that the rows lack is one line."""
    fn = load_reward(spec, key)
    if spec in BUILT_INS:
        return fn
    params = inspect.signature(fn).parameters.values()
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
    verl = is_verl(fn)
    if not verl and not takes_all and "completions" not in {p.name for p in params}:
        raise ConfigError(f"{key}: {spec} has no parameter 'completions': reward functions are called as "
                          f"fn(prompts, completions, **columns) (TRL's signature) or compute_score(data_source, "
                          f"solution_str, ground_truth, extra_info) (verl's)")
    known = VERL_KEYWORDS if verl else (*TRL_KEYWORDS, *(columns or ()))
    for p in params:
        required = p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)
        if required and verl and p.name not in known:
            raise ConfigError(f"{key}: {spec} needs the parameter {p.name!r}, which verl's compute_score is never "
                              f"given ({', '.join(VERL_KEYWORDS)}): give it a default")
        if required and columns is not None and p.name not in known:
            raise ConfigError(f"{key}: {spec} needs the parameter {p.name!r}, which is no column of the data "
                              f"(columns: {', '.join(sorted(columns)) or 'none'}): give it a default or add the column")
    return fn


def check_rewards(specs: list[str], weights: list[float] | None, columns: set[str] | None, judge: dict | None = None,
                  examples: list[tuple[str, object, dict]] = (), options: RewardOptions = RewardOptions()) -> list:
    """The dry run's check of `method_args.rewards`, `reward_weights` and `judge`, before anything is
    written. `examples`: sampled rows (where, prompt, columns) the judge's template must render with;
    returns what the judge would be asked of them (training.contract.judge.JudgeRequest)."""
    from training.contract import judge as llm_judge

    if not specs:
        raise ConfigError("method_args.rewards is empty: name at least one reward function, e.g. [math_verify]")
    if weights is not None and len(weights) != len(specs):
        raise ConfigError(f"method_args.reward_weights has {len(weights)} weights for {len(specs)} rewards "
                          f"({', '.join(specs)}): give one weight per reward function")
    for i, spec in enumerate(specs):
        if spec != llm_judge.NAME:
            check_reward(spec, columns, f"method_args.rewards[{i}]")
    if llm_judge.NAME not in specs:
        if judge:
            raise ConfigError(f"{llm_judge.KEY} is set but method_args.rewards does not name it: add "
                              f"{llm_judge.NAME} to the rewards, e.g. rewards: [{llm_judge.NAME}]")
        return []
    return llm_judge.example_requests(
        llm_judge.judge_settings(judge), list(examples),
        lambda row_columns: reference_or_none({k: [v] for k, v in row_columns.items()}, 0, options))


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


def call_reward(spec: str, options: RewardOptions, prompts: list, completions: list, columns: dict[str, list],
                extras: dict | None = None):
    """One call as the trainer makes it (in the pool's process): the function's own scores, unchecked.
    `extras`: TRL's `completion_ids` and `trainer_state`."""
    fn = load_reward(spec)
    if spec in BUILT_INS:
        return fn(prompts, completions, options, **columns)
    if is_verl(fn):
        return [verl_score(fn, completion, columns, row, options) for row, completion in enumerate(completions)]
    return fn(**taken(fn, {"prompts": prompts, "completions": completions, **columns, **(extras or {})}))


def verl_score(fn: Callable, completion, columns: dict[str, list], row: int, options: RewardOptions):
    """verl's call of one completion (its reward manager's): the row's data source and extra info,
    the reference answer as ground truth (GSM8K's: its number); a dict's `score`."""
    def column(name, default):
        return columns[name][row] if name in columns else default

    truth = gsm8k_answer(reference_answer(columns, row, options))
    value = fn(**taken(fn, {"data_source": column("data_source", ""), "solution_str": completion_text(completion),
                            "ground_truth": truth, "extra_info": column("extra_info", None)}))
    return value["score"] if isinstance(value, dict) else value
