"""What the launcher and the config need to know of a training method, read without importing it.

A method is one module of training/methods (its name is `training_args.trainer_type`). Its module
states, at its top level, the facts that do not need torch:
    SEQUENCES_PER_SAMPLE = 2     # sequences the model runs per training sample (DPO: chosen + rejected)
    PACKING = False              # whether several samples may share a row (datasets.packing)
    DATA_FORMAT = "pairs"        # the rows it reads: chat (SFT's formats), pairs, prompts (GRPO)
    COMPARED_METRIC = "loss"     # the step metric a resized run must reproduce (a rehearsal's MATCHED)
    FUSED_LOSS = False           # trains through the model's fused head and loss (SFT): the plan counts its gradients
    @dataclass
    class Args:                  # its own keys, set as training_args.method_args.<key>
        beta: float = ranged(0.1, gt=0)
These are read from the module's source (the module itself imports torch): literal values, and an
`Args` dataclass whose defaults use only `ranged` and `one_of` (training.contract.typed). A method may
instead import its `Args` from a torch-free module of training.contract, as GRPO does
(training.contract.grpo_args): ordinary code, imported here as it is.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.contract.errors import ConfigError
from training.contract.typed import build, one_of, ranged

METHODS_DIR = Path(__file__).resolve().parent.parent / "methods"
ARGS_KEY = "training_config.training_args.method_args"  # where a method's own keys are set


@dataclass(frozen=True)
class MethodFacts:
    name: str
    sequences_per_sample: int = 1
    packing: bool = True
    data_format: str = "chat"
    compared_metric: str = "loss"
    fused_loss: bool = False  # trains through the model's fused head and loss (its gradients held to backward)
    args: type = field(default=dataclasses.make_dataclass("Args", []))  # its keys' schema

    def build_args(self, values: dict | None, path: str = ARGS_KEY):
        """The method's arguments from the config's `method_args`, typed and checked (a one-line
        ConfigError naming the key otherwise)."""
        return build(self.args, dict(values or {}), path)


def method_names() -> tuple[str, ...]:
    """The trainer_type values (training_args.trainer_type) a module of training/methods implements."""
    return tuple(sorted(p.stem for p in METHODS_DIR.glob("*.py") if p.stem not in ("__init__", "base")))


@functools.cache
def method_facts(name: str) -> MethodFacts:
    path = METHODS_DIR / f"{name}.py"
    if not path.exists():
        raise ConfigError(f"training_args.trainer_type={name!r} is not a module of training/methods "
                          f"(one of {', '.join(method_names())})")
    facts: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            key = {"SEQUENCES_PER_SAMPLE": "sequences_per_sample", "PACKING": "packing",
                   "DATA_FORMAT": "data_format", "COMPARED_METRIC": "compared_metric",
                   "FUSED_LOSS": "fused_loss"}.get(node.targets[0].id)
            if key:
                facts[key] = ast.literal_eval(node.value)
        elif isinstance(node, ast.ClassDef) and node.name == "Args":
            facts["args"] = _args_class(node, name)
        elif (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("training.contract.")
              and any(alias.name == "Args" for alias in node.names)):
            facts["args"] = importlib.import_module(node.module).Args
    return MethodFacts(name, **facts)


def _args_class(node: ast.ClassDef, method: str) -> type:
    """The `Args` dataclass rebuilt from its source: field names, types and defaults."""
    fields = []
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            default = eval(compile(ast.Expression(item.value), f"training/methods/{method}.py", "eval"),  # noqa: S307
                           {"ranged": ranged, "one_of": one_of}) if item.value else dataclasses.MISSING
            spec = default if isinstance(default, dataclasses.Field) else field(default=default)
            fields.append((item.target.id, ast.unparse(item.annotation), spec))
    return dataclasses.make_dataclass("Args", fields)


def sampling_options(tc):
    """The keys of a method that samples completions of prompts (GRPO's `method_args`), else None."""
    method = method_facts(tc.training_args.trainer_type)
    return method.build_args(tc.training_args.method_args) if method.data_format == "prompts" else None
