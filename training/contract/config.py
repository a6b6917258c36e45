"""The training config's schema: what one per-size file holds, with every default in one place.

The launcher composes a recipe on top of these defaults (Hydra sees them as `recipes/common/schema`),
validates it for every allowed node count and writes one file per count; the trainer reads the
file for its live node count on every restart. Plain dataclasses: this module must never import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.contract.errors import ConfigError
from training.contract.evaluation import TrainingEvaluation
from training.contract.grpo_args import check_sampling_options
from training.contract.methods import method_facts, method_names
from training.contract.typed import build, one_of, ranged
from training.contract.data_formats import FORMATS, PROMPT_FORMATS

# GRPO's rollout behind the policy: its checkpoint holds that many older policies
MAX_STEPS_OFF_POLICY = "training_args.method_args.max_steps_off_policy"

# Settings a resumed run must share with its checkpoint, as paths under training_config: the data
# stream (which samples, in which order, in which global batches) hangs on them. The launcher
# refuses a plan whose sizes differ in any of them; the trainer refuses a resume that changes one.
RESUME_INVARIANTS = ("training_args.train_batch_size", "training_args.seed", "training_args.trainer_type",
                     "datasets.train_data", "datasets.split", "datasets.subset", "datasets.format", "datasets.messages_key", "datasets.max_len",
                     "datasets.packing", "datasets.train_val_split_ratio", "datasets.enable_thinking", "datasets.chat_template",
                     "model_config.peft_config", "checkpoint.uri", MAX_STEPS_OFF_POLICY)
# A method's key (method_args is a dict) that is not set holds its default.
UNSET_DEFAULTS = {MAX_STEPS_OFF_POLICY: 0}


def get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part, UNSET_DEFAULTS.get(path)) if isinstance(obj, dict) else getattr(obj, part)
    return obj


def deep_merge(base: dict, override: dict) -> dict:
    """OmegaConf.merge's semantics (mappings merge recursively, everything else is replaced) on
    plain, already resolved data, at a tenth of its cost: a plan merges once per node count."""
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


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
    # The trained weights, their optimizer state and the step's gradient sum. fp64 sums a step's
    # micro-batch gradients exactly in any order, so a run keeps the same weights bit for bit at any
    # world size wherever each micro-batch holds the same rows at every size (computing in
    # mixed_precision's dtype all the same); twice the state's memory. For CPU rehearsals whose
    # sampled draws must not part from the fixed-size run's (docs/agents.md).
    master_weights: str = one_of("fp32", "fp64")
    activation_checkpointing: str = one_of("none", "selective", "full")  # selective: every other layer
    compile: bool | None = None  # torch.compile each decoder layer; None: on GPU only
    # fsdp: the state sharded over every GPU; hsdp: over one node's GPUs, replicated across nodes (each
    # layer's gathers stay on the node, gradients cross the network once per step); auto: the launcher
    # picks per size, hsdp wherever it fits. `sharding_degree` fixes the GPUs the state is sharded over.
    sharding: str = one_of("auto", "fsdp", "hsdp")
    sharding_degree: int | None = ranged(None, ge=1)
    loss_chunk_tokens: int = ranged(1024, ge=0)  # LM head + loss this many tokens at a time (0: all at once)
    peft_config: PeftConfig | None = None  # None: full-parameter training

    @property
    def lora(self) -> bool:
        """Only LoRA adapters train (and are checkpointed); the base stays frozen."""
        return self.peft_config is not None

    def shard_degree(self, world_size: int, nodes: int) -> int:
        """The GPUs the model state is sharded over (each group of them holds one replica): the
        `sharding_degree` where set, one node's GPUs under hsdp, else all of them (fsdp; auto where
        the launcher did not resolve it)."""
        if self.sharding_degree:
            return self.sharding_degree
        if self.sharding == "hsdp" and nodes > 1 and world_size % nodes == 0:
            return world_size // nodes
        return world_size


@dataclass
class DatasetConfig:
    # JSONL/JSON/Parquet/CSV file or directory, a save_to_disk directory, or a hub dataset id
    train_data: str = "data/sft_tiny.jsonl"
    split: str = "train"
    subset: str | None = None  # a hub dataset's configuration (load_dataset's `name`), e.g. openai/gsm8k's "main"
    format: str = one_of(*FORMATS, *PROMPT_FORMATS[1:])  # auto (from the columns), messages, sharegpt, ...; GRPO's prompt, verl, question
    messages_key: str = "messages"  # SFT: the chat column; DPO reads prompt/chosen/rejected
    max_len: int = ranged(4096, ge=2)  # sequence length: samples are truncated (or packed) to this many tokens
    packing: bool = False
    num_workers: int = ranged(0, ge=0)
    train_val_split_ratio: float = ranged(1.0, gt=0, le=1)  # share of rows trained on; the rest validate
    enable_thinking: bool | None = None  # passed to the chat template if set (Qwen3: false trains without reasoning)
    chat_template: str | None = None  # a Jinja chat template (its text, or a file), for a tokenizer without one

    @property
    def template_kwargs(self) -> dict:
        """The chat template's arguments every rendering of the run's rows takes."""
        return {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}


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
    trainer_type: str = one_of("sft", *(m for m in method_names() if m != "sft"))  # a module of training/methods
    method_args: dict[str, Any] = field(default_factory=dict)  # the method's own keys (its module's `Args`)
    save_hf_ckpt: bool = False  # write a Hugging Face model to <run_dir>/hf at the last step
    merge_weights: bool = True  # LoRA: also write the merged model (hf/); the adapter alone goes to hf_adapter/


@dataclass
class CheckpointConfig:
    save_steps: int = ranged(50, ge=1)  # also saved on every elastic event and at the last step
    keep_last: int = ranged(3, ge=1)  # the newest checkpoint is never deleted
    async_save: bool = False
    save_timeout: float = ranged(1800.0, gt=0)  # seconds a save may take before the run fails with an error
    ignore_fingerprint: bool = False  # resume even if global batch / seq len / data changed
    # Every N steps each rank's state is copied to host memory on its node and a buddy node, so a node
    # that dies costs the steps since the copy (training.state.peer_store); 0: off. Unset: the launcher
    # sets 1 for an elastic job of two or more nodes where the copies fit in the pods' memory, else 0.
    peer_steps: int | None = ranged(None, ge=0)
    # s3://bucket/prefix: every checkpoint in a bucket (training.state.checkpoint_store), credentials and region
    # from the standard AWS variables or the pod's service account; None: the run directory's checkpoints/
    uri: str | None = None


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
    evaluation: TrainingEvaluation = field(default_factory=TrainingEvaluation)  # benchmarks while training


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
    mc = tc.model_config
    if mc.architecture and mc.model_name_or_path:
        raise ConfigError(f"training_config.model_config sets both model_name_or_path={mc.model_name_or_path!r} and an "
                          f"inline architecture (model_type {mc.architecture.get('model_type')}): set "
                          f"model_config.architecture=null to train that model, or model_name_or_path=null to build the "
                          f"inline one")
    uri = tc.checkpoint.uri
    if uri is not None and not (uri.startswith("s3://") and uri[5:].split("/")[0]):
        raise ConfigError(f"training_config.checkpoint.uri={uri!r} is not an S3 uri: give s3://<bucket>/<prefix>, or "
                          f"leave it unset for the run directory's checkpoints/")
    method = method_facts(tc.training_args.trainer_type)
    options = method.build_args(tc.training_args.method_args)
    if method.data_format == "prompts":
        check_sampling_options(tc.training_args.train_batch_size, options)
    if tc.datasets.format != "auto" and method.data_format == "pairs":
        raise ConfigError(f"training_config.datasets.format={tc.datasets.format!r} with trainer_type={method.name}: "
                          f"formats are SFT's; preference training reads pairs (prompt, chosen, rejected): set "
                          f"datasets.format=auto")
    if method.data_format != "prompts" and tc.datasets.format in PROMPT_FORMATS[1:]:
        raise ConfigError(f"training_config.datasets.format={tc.datasets.format!r} with trainer_type={method.name}: "
                          f"that is a prompt format (GRPO's); set datasets.format=auto or one of {', '.join(FORMATS[1:])}")
    if method.data_format == "prompts" and tc.datasets.format not in PROMPT_FORMATS:
        raise ConfigError(f"training_config.datasets.format={tc.datasets.format!r} with trainer_type={method.name}: "
                          f"it reads prompts: set datasets.format to one of {', '.join(PROMPT_FORMATS)}")
    if tc.datasets.packing and not method.packing:
        raise ConfigError(f"training_config.datasets.packing=true with trainer_type={method.name}: the method "
                          f"scores whole sequences, not packed rows; set datasets.packing=false")
    # (a directory may hold a validation or test split, which then validates: the trainer checks)
    if tc.training_args.eval_steps and tc.datasets.train_val_split_ratio >= 1 and not Path(tc.datasets.train_data).is_dir():
        raise ConfigError(f"training_config.training_args.eval_steps={tc.training_args.eval_steps} but "
                          f"datasets.train_val_split_ratio=1.0 leaves no validation rows: set it below 1 (e.g. 0.9), "
                          f"give a directory with a validation split as train_data, or set eval_steps=0")
