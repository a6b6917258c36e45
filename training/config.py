"""The training config: schema, per-size file contract and batch math.

Shared by the launcher (which validates and renders one config per allowed node count) and the
trainer (which reads the file for its live node count on every restart). Both sides call the same
functions, so they cannot disagree about what a config means. Plain dataclasses and arithmetic:
this module must never import torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --- the per-size file contract -------------------------------------------------------------------
# The launcher writes BASE_CONFIG_FILE plus one file per allowed node count into a directory (a
# ConfigMap mounted at /config on a cluster); the trainer picks the file for its node count and
# falls back to the base file (with derived batch math) for a count that has none.
BASE_CONFIG_FILE = "config.yaml"
CONFIG_DIR_ENV = "ELASTIC_CONFIG_DIR"
# Local runs simulate N nodes inside one torchrun; without it nodes = WORLD_SIZE / LOCAL_WORLD_SIZE.
NUM_NODES_ENV = "ELASTIC_NUM_NODES"


def config_file_for(nodes: int) -> str:
    return f"config-n{nodes}.yaml"


def select_config_file(config_dir: str | Path, nodes: int) -> tuple[Path, bool]:
    """The config file for `nodes`, and whether it is a per-size file (False: the base fallback)."""
    config_dir = Path(config_dir)
    sized = config_dir / config_file_for(nodes)
    if sized.is_file():
        return sized, True
    base = config_dir / BASE_CONFIG_FILE
    if not base.is_file():
        raise ConfigError(f"no {config_file_for(nodes)} or {BASE_CONFIG_FILE} in config dir '{config_dir}': "
                          f"point --config-dir (or ${CONFIG_DIR_ENV}) at the launcher's rendered configs")
    return base, False


class ConfigError(ValueError):
    """A configuration mistake a user can fix. Its message is one line: key, value and the fix."""


def report(error: BaseException) -> int:
    """Print a user error as one line on stderr (re-raise it with HYDRA_FULL_ERROR=1 for the
    traceback) and return exit code 2. Shared by the launcher and the trainer."""
    import os
    import sys

    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    # One write: under `python -u` print() writes the text and the newline separately, and the
    # ranks of a job sharing a terminal would interleave them into one line.
    sys.stderr.write(f"error: {error}\n")
    sys.stderr.flush()
    return 2


# Settings a resumed run must share with its checkpoint, as paths under training_config: the data
# stream (which samples, in which order, in which global batches) hangs on them. The launcher
# refuses a plan whose sizes differ in any of them; the trainer refuses a resume that changes one.
RESUME_INVARIANTS = ("training_args.train_batch_size", "training_args.seed", "training_args.trainer_type",
                     "datasets.train_data", "datasets.split", "datasets.messages_key", "datasets.max_len",
                     "datasets.packing", "datasets.train_val_split_ratio", "model_config.peft_config")


def get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def ranged(default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None,
           le: float | None = None):
    """A dataclass field whose value `build` checks against bounds, e.g. `ranged(50, ge=1)`."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("lt", lt), ("le", le)) if v is not None}
    return field(default=default, metadata={"bounds": bounds})


def one_of(default: str, *choices: str):
    """A string dataclass field that `build` checks against `choices`."""
    return field(default=default, metadata={"choices": (default, *choices)})


_BOUND_TESTS = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
                "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}


def _check_bounds(value: Any, bounds: dict, path: str) -> None:
    if value is None:
        return
    for name, bound in bounds.items():
        test, symbol = _BOUND_TESTS[name]
        if not test(value, bound):
            rule = " and ".join(f"{_BOUND_TESTS[n][1]} {b:g}" for n, b in bounds.items())
            raise ConfigError(f"{path}={value!r} is out of range: it must be {rule}")


# --- schema ----------------------------------------------------------------------------------------
@dataclass
class UnevenBatch:
    """Per-rank batches when the global batch does not divide by the data-parallel size (as upstream):
    `num_dp_groups_with_small_batch_size` ranks take `small_local_batch_size` samples, the rest take
    `large_local_batch_size`. Derived automatically when none of the three numbers is given."""

    use_uneven_batch: bool = False
    num_dp_groups_with_small_batch_size: int | None = None
    small_local_batch_size: int | None = None
    large_local_batch_size: int | None = None


@dataclass
class PeftConfig:
    """LoRA adapters (peft), with the keys of the vendor's recipes: only the adapters train and are
    checkpointed; the base model stays frozen (bf16 on GPU)."""

    peft_type: str = one_of("lora")
    r: int = ranged(16, ge=1)
    lora_alpha: float = ranged(32.0, gt=0)
    lora_dropout: float = ranged(0.05, ge=0, lt=1)
    target_modules: Any = "all-linear"  # "all-linear" (every linear layer but the LM head) or a list of names


@dataclass
class ModelConfig:
    model_name_or_path: str | None = None  # hub id or local directory (the real loading path)
    architecture: dict[str, Any] | None = None  # inline transformers config (model_type + kwargs), random init
    tokenizer_name_or_path: str | None = None  # defaults to model_name_or_path
    attn_implementation: str | None = None  # None: transformers' default (sdpa); flex_attention on GPU for packing
    mixed_precision: str = one_of("bf16", "fp32")  # bf16 compute with fp32 reduction on GPU; CPU always runs fp32
    activation_checkpointing: str = one_of("none", "selective", "full")  # selective: every other layer
    compile: bool | None = None  # torch.compile each decoder layer; None: on GPU only
    sharding: str = one_of("fsdp", "hsdp")  # hsdp: shard within a node, replicate across nodes
    loss_chunk_tokens: int = ranged(8192, ge=0)  # LM head + loss this many tokens at a time (0: all at once)
    peft_config: PeftConfig | None = None  # None: full-parameter training


@dataclass
class DatasetConfig:
    train_data: str = "data/sft_tiny.jsonl"  # JSONL/Parquet file or directory, or a hub dataset id
    split: str = "train"
    messages_key: str = "messages"  # SFT: the chat column; DPO reads prompt/chosen/rejected
    max_len: int = ranged(4096, ge=2)  # sequence length: samples are truncated (or packed) to this many tokens
    packing: bool = False
    num_workers: int = ranged(0, ge=0)
    train_val_split_ratio: float = ranged(1.0, gt=0, le=1)  # share of rows trained on; the rest validate


@dataclass
class TrainingArgs:
    train_batch_size: int = 128  # global batch in samples; constant across resizes
    micro_train_batch_size: int = 1  # samples per rank per forward/backward
    learning_rate: float = ranged(1e-5, gt=0)
    min_learning_rate: float = ranged(0.0, ge=0)  # floor of the cosine decay
    warmup_steps: int = ranged(0, ge=0)
    max_steps: int = ranged(100, ge=1)
    max_epochs: float | None = ranged(None, gt=0)  # if set, replaces max_steps: passes over the training rows
    lr_warmup_ratio: float | None = ranged(None, ge=0, lt=1)  # if set, replaces warmup_steps: share of max_steps
    eval_steps: int = ranged(0, ge=0)  # validation loss every this many steps (0: never); needs a split ratio < 1
    weight_decay: float = ranged(0.0, ge=0)
    adam_beta1: float = ranged(0.9, ge=0, lt=1)
    adam_beta2: float = ranged(0.95, ge=0, lt=1)
    max_grad_norm: float = ranged(1.0, gt=0)
    max_skipped_steps: int = ranged(0, ge=0)  # steps with a non-finite loss/gradient to skip before stopping
    seed: int = ranged(42, ge=0)
    uneven_batch: UnevenBatch = field(default_factory=UnevenBatch)
    trainer_type: str = one_of("sft", "dpo")
    beta: float = ranged(0.1, gt=0)  # DPO: strength of the pull towards the reference model
    loss_type: str = one_of("sigmoid", "hinge", "ipo")  # DPO loss on the reward margin
    save_hf_ckpt: bool = False  # write a Hugging Face model to <run_dir>/hf at the last step
    merge_weights: bool = True  # LoRA: also write the merged model (hf/); the adapter alone goes to hf_adapter/


@dataclass
class CheckpointConfig:
    save_steps: int = ranged(50, ge=1)  # also saved on every elastic event and at the last step
    keep_last: int = ranged(3, ge=1)  # the newest checkpoint is never deleted
    async_save: bool = False
    save_timeout: float = ranged(1800.0, gt=0)  # seconds a save may take before the run fails with an error
    ignore_fingerprint: bool = False  # resume even if global batch / seq len / data changed


@dataclass
class MlflowConfig:
    tracking_uri: str | None = None  # file:/path, http(s)://server, or a SageMaker MLflow tracking server ARN
    experiment: str = "elastic-launcher"
    run_name: str | None = None  # default: the run directory's name


@dataclass
class LoggingConfig:
    log_every: int = ranged(1, ge=1)
    tensorboard: bool = False
    audit_samples: bool = False  # write the sample ids of every step to samples.jsonl
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)  # off until tracking_uri is set


@dataclass
class TrainingSection:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    datasets: DatasetConfig = field(default_factory=DatasetConfig)
    training_args: TrainingArgs = field(default_factory=TrainingArgs)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


@dataclass
class RunConfig:
    name: str = "run"
    output_dir: str = "runs/run"  # checkpoints/, metrics.jsonl, samples.jsonl live here


@dataclass
class TrainerConfig:
    num_nodes: int = ranged(1, ge=1)
    nproc_per_node: int | None = ranged(None, ge=1)  # None: the instance type's accelerators (1 on CPU instances)


@dataclass
class JobConfig:
    """One resolved training config: what a per-size file holds."""

    run: RunConfig = field(default_factory=RunConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    instance_type: str = "local"
    training_config: TrainingSection = field(default_factory=TrainingSection)


def _suggest(word: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(sorted(map(str, choices)))}"


def _check_type(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check_type(value, inner, path)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)
    expected = origin or hint
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        dict: isinstance(value, dict),
        list: isinstance(value, list),
    }.get(expected, True)
    if not ok:
        name = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                "dict": "a mapping", "list": "a list"}[expected.__name__]
        raise ConfigError(f"{path}={value!r} is not {name}: set it to {name}")
    return float(value) if expected is float else value


def build(cls: type, data: Any, path: str = ""):
    """Build dataclass `cls` from a plain mapping, rejecting unknown keys (with a suggestion) and
    values of the wrong type; missing keys take the dataclass defaults."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}={data!r} must be a mapping of {cls.__name__} fields")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in hints:
            raise ConfigError(f"unknown key '{where}': {_suggest(key, fields)}")
        kwargs[key] = _check_type(value, hints[key], where)
        _check_bounds(kwargs[key], fields[key].metadata.get("bounds", {}), where)
        choices = fields[key].metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{where}={value!r} is not one of {', '.join(choices)}: {_suggest(value, choices)}")
    return cls(**kwargs)


def load_job_config(path: str | Path) -> JobConfig:
    import yaml

    with open(path) as f:
        cfg = build(JobConfig, yaml.safe_load(f), "")
    check_methods(cfg.training_config)
    return cfg


def check_methods(tc: TrainingSection) -> None:
    """Settings that only make sense together (checked by the launcher for every size, and by the trainer)."""
    peft = tc.model_config.peft_config
    if peft is not None and not (peft.target_modules == "all-linear" or (
            isinstance(peft.target_modules, list) and peft.target_modules
            and all(isinstance(m, str) for m in peft.target_modules))):
        raise ConfigError(f"training_config.model_config.peft_config.target_modules={peft.target_modules!r} must be "
                          f"'all-linear' or a list of module names (e.g. [q_proj, v_proj])")
    if tc.training_args.trainer_type == "dpo" and tc.datasets.packing:
        raise ConfigError("training_config.datasets.packing=true with trainer_type=dpo: DPO compares whole "
                          "sequences pair by pair; set datasets.packing=false")
    if tc.training_args.eval_steps and tc.datasets.train_val_split_ratio >= 1:
        raise ConfigError(f"training_config.training_args.eval_steps={tc.training_args.eval_steps} but "
                          f"datasets.train_val_split_ratio=1.0 leaves no validation rows: set it below 1 (e.g. 0.9) "
                          f"or eval_steps=0")


def resolve_schedule(args: TrainingArgs, train_rows: int) -> TrainingArgs:
    """max_steps and warmup_steps from max_epochs and lr_warmup_ratio where those are set. A function
    of the training rows and the global batch only, so every size resolves the same schedule."""
    max_steps = max(1, math.ceil(args.max_epochs * train_rows / args.train_batch_size)) if args.max_epochs \
        else args.max_steps
    warmup = round(args.lr_warmup_ratio * max_steps) if args.lr_warmup_ratio is not None else args.warmup_steps
    return dataclasses.replace(args, max_steps=max_steps, warmup_steps=warmup)


# --- batch math ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchPlan:
    """How one global batch is split at one data-parallel size. Rank k takes positions
    [offsets[k], offsets[k] + local_batches[k]) of each step's global window, so the set of samples
    per step is the same at every size; only which rank holds which sample changes."""

    global_batch: int
    local_batches: tuple[int, ...]  # per data-parallel rank
    micro_batch: int
    grad_accum_steps: int  # the same on every rank: FSDP collectives must line up

    @property
    def dp_size(self) -> int:
        return len(self.local_batches)

    @property
    def uneven(self) -> bool:
        return len(set(self.local_batches)) > 1

    @property
    def offsets(self) -> tuple[int, ...]:
        out, total = [], 0
        for b in self.local_batches:
            out.append(total)
            total += b
        return tuple(out)

    def describe_local(self) -> str:
        if not self.uneven:
            return str(self.local_batches[0])
        small, large = min(self.local_batches), max(self.local_batches)
        n_small = self.local_batches.count(small)
        return f"{n_small}x{small}+{self.dp_size - n_small}x{large}"


def plan_batches(args: TrainingArgs, dp_size: int, where: str = "training_config.training_args") -> BatchPlan:
    """Validate the batch settings at `dp_size` ranks and derive the per-rank split."""
    B, micro, ub = args.train_batch_size, args.micro_train_batch_size, args.uneven_batch
    if args.min_learning_rate > args.learning_rate:
        raise ConfigError(f"{where}.min_learning_rate={args.min_learning_rate:g} is above learning_rate="
                          f"{args.learning_rate:g}: the cosine decay would rise; lower it to <= {args.learning_rate:g}")
    if B < 1:
        raise ConfigError(f"{where}.train_batch_size={B} must be >= 1")
    if micro < 1:
        raise ConfigError(f"{where}.micro_train_batch_size={micro} must be >= 1")
    if dp_size > B:
        raise ConfigError(f"{where}.train_batch_size={B} is smaller than the data-parallel size {dp_size}: "
                          f"raise train_batch_size to >= {dp_size} or disallow this node count")
    numbers = (ub.num_dp_groups_with_small_batch_size, ub.small_local_batch_size, ub.large_local_batch_size)
    given = [n is not None for n in numbers]
    if any(given) and not ub.use_uneven_batch:
        raise ConfigError(f"{where}.uneven_batch sets batch sizes but use_uneven_batch=false: "
                          f"set use_uneven_batch=true or remove the sizes")
    if any(given) and not all(given):
        raise ConfigError(f"{where}.uneven_batch gives only some of num_dp_groups_with_small_batch_size, "
                          f"small_local_batch_size, large_local_batch_size: give all three or none (derived)")
    if all(given):
        n_small, small, large = numbers
        if not 0 <= n_small <= dp_size:
            raise ConfigError(f"{where}.uneven_batch.num_dp_groups_with_small_batch_size={n_small} is outside "
                              f"[0, {dp_size}] (the data-parallel size): fix it or remove the uneven sizes")
        if not 1 <= small <= large:
            raise ConfigError(f"{where}.uneven_batch small_local_batch_size={small}, large_local_batch_size={large}: "
                              f"need 1 <= small <= large")
        total = n_small * small + (dp_size - n_small) * large
        if total != B:
            raise ConfigError(f"{where}.uneven_batch gives {n_small}x{small} + {dp_size - n_small}x{large} = {total} "
                              f"samples at data-parallel size {dp_size}, but train_batch_size={B}: "
                              f"make them sum to {B} or remove the sizes to derive them")
        local = (small,) * n_small + (large,) * (dp_size - n_small)
    else:
        # Even when B divides; otherwise the smallest possible imbalance, small ranks first.
        small, rem = divmod(B, dp_size)
        local = (small,) * (dp_size - rem) + (small + 1,) * rem
    return BatchPlan(B, local, micro, math.ceil(max(local) / micro))
