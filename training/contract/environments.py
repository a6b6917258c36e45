"""Agent environments as TRL users write them (`environment_factory`): a class instantiated once per
trajectory, whose `reset(**row)` starts the episode from the data row (and may return a first
observation), and whose public methods, with type hints and a docstring, are the tools the model may
call. `method_args.environment` names it as `path/to/file.py:Class` or `package.module:Class`.

This module loads and checks one (the dry run's check, before anything is written) and turns its
tools into the JSON schemas a chat template offers the model (transformers' `get_json_schema`).
Torch-free: the launcher imports it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from training.contract.errors import ConfigError
from training.contract.rewards import load_reward

KEY = "training_config.training_args.method_args.environment"
LIFECYCLE = ("reset",)  # public methods that are not tools
AGENT_ON_VLLM = f"{KEY}: an agent's multi-turn rollouts run on the trainer's own sampler; set rollout_engine=trainer"


@dataclass(frozen=True)
class Tool:
    name: str
    schema: dict  # {"type": "function", "function": {"name", "description", "parameters"}}


def load_environment(spec: str) -> type:
    """The class `spec` names (a file or a module, as reward functions are named): a missing file,
    module or class is one line naming it."""
    cls = load_reward(spec, KEY, kind="class")  # the same lookup: a callable by name in a file or module
    if not inspect.isclass(cls):
        raise ConfigError(f"{KEY}={spec!r} names {type(cls).__name__} {cls.__name__!r}, not a class: name the "
                          f"environment's class (a TRL environment_factory class)")
    if not callable(getattr(cls, "reset", None)):
        raise ConfigError(f"{KEY}={spec!r}: {cls.__name__} has no reset(**row) method: an environment starts each "
                          f"episode from its data row there")
    return cls


def tool_methods(cls: type) -> dict[str, Callable]:
    """The environment's tools: its public methods other than reset, by name."""
    return {name: member for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and name not in LIFECYCLE}


def tools(cls: type) -> list[Tool]:
    """Each tool's JSON schema, from its type hints and docstring (transformers' get_json_schema):
    a tool without them is one line naming it."""
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

    found = []
    for name, method in tool_methods(cls).items():
        try:
            schema = get_json_schema(method)
        except (DocstringParsingException, TypeHintParsingException) as e:
            raise ConfigError(f"{KEY}: the tool {cls.__name__}.{name} cannot be offered to the model: {e} (a tool "
                              f"needs a type hint on every argument and a docstring with an Args: section)") from None
        # get_json_schema lists `self` for a method taken from the class: the model never passes it
        parameters = schema["function"].get("parameters", {})
        parameters.get("properties", {}).pop("self", None)
        if "self" in parameters.get("required", []):
            parameters["required"] = [p for p in parameters["required"] if p != "self"]
        found.append(Tool(name, schema))
    if not found:
        raise ConfigError(f"{KEY}: {cls.__name__} has no public method besides reset: its methods are the tools the "
                          f"model calls")
    return found


def check_environment(spec: str | None, rewards: list, reward_loader: Callable = load_reward) -> list[Tool]:
    """The dry run's check: the environment loads and its tools have schemas; a reward function that
    asks for `environments` needs an environment. Returns the tools (none without an environment)."""
    wanting = [r for r in rewards if _asks_for_environments(r, reward_loader)]
    if spec is None:
        if wanting:
            raise ConfigError(f"reward function {wanting[0]} takes `environments`, and no {KEY} is set: name the "
                              f"environment class it reads (path/to/file.py:Class)")
        return []
    return tools(load_environment(spec))


def _asks_for_environments(spec, loader) -> bool:
    if not isinstance(spec, str) or spec in ("judge", "math_verify", "exact_match", "format"):
        return False
    try:
        fn = loader(spec)
    except ConfigError:
        return False  # the rewards' own check names it
    return "environments" in inspect.signature(fn).parameters
