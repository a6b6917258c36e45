"""What the launcher and the config need to know of a training method, read without importing torch.

A method is one module of training/methods (its name is `training_args.trainer_type`). Its facts and
keys are ordinary code at the top of a module:
    SEQUENCES_PER_SAMPLE = 2     # sequences the model runs per training sample (DPO: chosen + rejected)
    PACKING = False              # whether several samples may share a row (datasets.packing)
    DATA_FORMAT = "pairs"        # the rows it reads: chat (SFT's formats), pairs, prompts (GRPO)
    COMPARED_METRIC = "loss"     # the step metric a resized run must reproduce (a rehearsal's MATCHED)
    FUSED_LOSS = False           # trains through the model's fused head and loss (SFT): the plan counts its gradients
    @dataclass
    class Args:                  # its own keys, set as training_args.method_args
        beta: float = ranged(0.1, gt=0)
The project's methods keep them in a torch-free module of the contract, `training/contract/<name>_args.py`,
imported here as it is. A method written as one module keeps them in that module, which imports torch:
a process without torch (the launcher) imports it in a child process and takes back its facts and its
keys' schema (names, types, defaults, bounds and choices).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from training.contract.errors import ConfigError
from training.contract.typed import build

CONTRACT_DIR = Path(__file__).resolve().parent
METHODS_DIR = CONTRACT_DIR.parent / "methods"
ARGS_KEY = "training_config.training_args.method_args"  # where a method's own keys are set
FACT_NAMES = {"SEQUENCES_PER_SAMPLE": "sequences_per_sample", "PACKING": "packing", "DATA_FORMAT": "data_format",
              "COMPARED_METRIC": "compared_metric", "FUSED_LOSS": "fused_loss"}


@dataclass
class NoArgs:  # a method without keys of its own
    pass


@dataclass(frozen=True)
class MethodFacts:
    name: str
    sequences_per_sample: int = 1
    packing: bool = True
    data_format: str = "chat"
    compared_metric: str = "loss"
    fused_loss: bool = False  # trains through the model's fused head and loss (its gradients held to backward)
    args: type = NoArgs  # its keys' schema

    def build_args(self, values: dict | None, path: str = ARGS_KEY):
        """The method's arguments from the config's `method_args`, typed and checked (a one-line
        ConfigError naming the key otherwise)."""
        return build(self.args, dict(values or {}), path)


def method_names() -> tuple[str, ...]:
    """The trainer_type values (training_args.trainer_type) a module of training/methods implements."""
    return tuple(sorted(p.stem for p in METHODS_DIR.glob("*.py") if p.stem not in ("__init__", "base")))


@functools.cache
def method_facts(name: str) -> MethodFacts:
    if not (METHODS_DIR / f"{name}.py").exists():
        raise ConfigError(f"training_args.trainer_type={name!r} is not a module of training/methods "
                          f"(one of {', '.join(method_names())})")
    if (CONTRACT_DIR / f"{name}_args.py").exists():
        return facts_of(name, importlib.import_module(f"training.contract.{name}_args"))
    if "torch" in sys.modules:  # a trainer's process: the method's module imports as it will run
        return facts_of(name, importlib.import_module(f"training.methods.{name}"))
    return _facts_from_child(name)


def facts_of(name: str, module) -> MethodFacts:
    """A method's facts as `module` states them (the defaults where it states none)."""
    stated = {key: getattr(module, constant) for constant, key in FACT_NAMES.items() if hasattr(module, constant)}
    return MethodFacts(name, **stated, args=getattr(module, "Args", NoArgs))


def facts_as_json(facts: MethodFacts) -> str:
    """`facts` for another process: its keys' schema as each field's name, type, default and checks."""
    args = [{"name": f.name, "type": f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)),
             "metadata": dict(f.metadata), **({} if f.default is dataclasses.MISSING else {"default": f.default})}
            for f in dataclasses.fields(facts.args)]  # a key without a default must be set
    return json.dumps({**{k: v for k, v in dataclasses.asdict(facts).items() if k != "args"}, "args": args})


def facts_from_json(text: str) -> MethodFacts:
    stated = json.loads(text)
    fields = [(a["name"], a["type"], field(default=a.get("default", dataclasses.MISSING), metadata=a["metadata"]))
              for a in stated.pop("args")]
    return MethodFacts(**stated, args=dataclasses.make_dataclass("Args", fields))


def _facts_from_child(name: str) -> MethodFacts:
    """The facts of a method written as one module, which imports torch: read by a child process that
    imports it, so that this one stays free of torch."""
    read = ("import importlib, sys\n"
            "from training.contract.methods import facts_as_json, facts_of\n"
            "print(facts_as_json(facts_of(sys.argv[1], importlib.import_module('training.methods.' + sys.argv[1]))))")
    out = subprocess.run([sys.executable, "-c", read, name], cwd=CONTRACT_DIR.parent.parent, capture_output=True,
                         text=True, timeout=300)
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["no error printed"])[-1]
        raise ConfigError(f"training_args.trainer_type={name!r}: training/methods/{name}.py does not import ({last}); "
                          f"fix the module, or run `python -c 'import training.methods.{name}'` to see the whole error")
    return facts_from_json(out.stdout.strip().splitlines()[-1])


def sampling_options(tc):
    """The keys of a method that samples completions of prompts (GRPO's `method_args`), else None."""
    method = method_facts(tc.training_args.trainer_type)
    return method.build_args(tc.training_args.method_args) if method.data_format == "prompts" else None
