"""Recipe -> plan: the elastic policy, the node counts it allows, and for each of them the fully
merged training config with its batch math. Everything is validated here, before anything is
written, so a bad recipe fails on the laptop instead of on the cluster."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from elastic_launcher.config.policy import ElasticPolicy, Hardware
from elastic_launcher.planning.instances import InstanceType, lookup
from elastic_launcher.planning.memory import (FIT_SHARE, Allowance, MemoryEstimate, ModelShape, estimate,
                                              trace_inputs, traced)
from elastic_launcher.planning.model_config import (check_shape, local_config, local_model_dir, readable_shape,
                                                    shape_of)
from elastic_launcher.planning.rollouts import check_phases, check_rollout_engine, rollout_phases, training_processes
from elastic_launcher.words import plural
from training.contract.batching import BatchPlan, plan_batches
from training.contract.config import RESUME_INVARIANTS, JobConfig, check_methods, deep_merge, get_path
from training.contract.errors import ConfigError
from training.contract.families import family_refusal
from training.contract.grpo_args import completion_budget
from training.contract.methods import method_facts, sampling_options
from training.contract.typed import build

RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class TypedKeys:
    """The recipe keys the user set on the command line, so the plan can honour them: a recipe key
    typed by the user wins over the scale_config entries that set it, unless the user also typed
    that entry's key."""

    recipe: frozenset[str] = frozenset()  # paths under recipes, e.g. training_config.training_args.learning_rate
    entries: frozenset[tuple[int, str]] = frozenset()  # (nodes, path inside that scale_config entry)

    @classmethod
    def from_overrides(cls, overrides: list[str]) -> "TypedKeys":
        recipe, entries = set(), set()
        for override in overrides:
            key = override.split("=", 1)[0]
            if "=" not in override or key.startswith("~") or not key.lstrip("+").startswith("recipes."):
                continue
            path = key.lstrip("+").removeprefix("recipes.")
            if path.startswith("scale_config."):
                _, entry, *rest = path.split(".")
                if rest:
                    try:
                        entries.add((scale_config_key(entry), ".".join(rest)))
                    except ConfigError:
                        pass  # reported when the scale config is normalized
            else:
                recipe.add(path)
        return cls(frozenset(recipe), frozenset(entries))


@dataclass(frozen=True)
class SizePlan:
    """Everything that holds at one allowed node count."""

    nodes: int
    nproc_per_node: int
    config: JobConfig
    batch: BatchPlan
    from_scale_config: bool  # False: base config with derived batch math (step policies)
    memory: MemoryEstimate | None = None  # peak per GPU; None without a model shape or GPUs

    @property
    def devices(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def shard_degree(self) -> int:
        """The GPUs the model state is sharded over (the plan resolves it at every size)."""
        return self.config.training_config.model_config.shard_degree(self.devices, self.nodes)

    @property
    def learning_rate(self) -> float:
        return self.config.training_config.training_args.learning_rate

    @property
    def tokens_per_step(self) -> int:
        """At most (full rows); DPO runs two sequences per sample, GRPO num_generations completions
        of each prompt, prompt + completion long."""
        tc = self.config.training_config
        if o := sampling_options(tc):
            return self.batch.global_batch * o.num_generations * (o.max_prompt_length + completion_budget(o))
        return self.batch.global_batch * tc.datasets.max_len * method_facts(tc.training_args.trainer_type).sequences_per_sample


@dataclass(frozen=True)
class Plan:
    job_name: str
    instance: InstanceType
    policy: ElasticPolicy
    base: JobConfig  # the recipe's config for a size without a scale_config entry (derived batch math)
    sizes: tuple[SizePlan, ...]  # ascending node counts
    unused_scale_configs: tuple[int, ...]  # entries outside [min, max]: valid, not used
    hardware: Hardware = field(default_factory=Hardware)
    warnings: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # what the command line changed beyond the obvious

    @property
    def initial_nodes(self) -> int:
        return self.sizes[0].nodes

    @property
    def nproc_per_node(self) -> int:
        return self.sizes[0].nproc_per_node

    def size(self, nodes: int) -> SizePlan | None:
        return next((s for s in self.sizes if s.nodes == nodes), None)


def scale_config_key(key) -> int:
    """`n4` (the command-line friendly form), `4` or '4' (upstream's integer keys) -> 4."""
    text = str(key)
    digits = text[1:] if text[:1] == "n" else text
    if not digits.isdigit() or int(digits) < 1:
        raise ConfigError(f"scale_config key {key!r} is not a node count: use n<nodes>, e.g. n4")
    return int(digits)


def normalize_scale_config(scale_config: dict | None) -> dict[int, dict]:
    """Entries keyed by node count. When both `4` and `n4` exist (an upstream block plus a
    command-line `+recipes.scale_config.n4...` override), `n4` is merged on top."""
    if scale_config is not None and not isinstance(scale_config, dict):
        hint = f"scale_configs@recipes.scale_config={scale_config}" if isinstance(scale_config, str) else \
            "scale_configs@recipes.scale_config=<set>"
        raise ConfigError(f"recipes.scale_config={scale_config!r} is not a mapping of n<nodes> entries: to swap the "
                          f"scale-config set use {hint}")
    entries: dict[int, dict] = {}
    for key in sorted(scale_config or {}, key=lambda k: str(k).startswith("n")):
        nodes, entry = scale_config_key(key), scale_config[key] or {}
        if not isinstance(entry, dict):
            raise ConfigError(f"recipes.scale_config.{key}={entry!r} must be a mapping of training-config overrides")
        entries[nodes] = deep_merge(entries.get(nodes, {}), entry)
    return entries


def allowed_sizes(policy: ElasticPolicy, scale_counts: list[int], static_nodes: int,
                  every_size: bool = False) -> list[int]:
    """The node counts a job may run at. `every_size`: the runtime (torchrun's c10d rendezvous)
    accepts any count in [min, max], so all of them must be valid."""
    key = "recipes.elastic_policy"
    if not policy.is_elastic:
        if static_nodes < 1:
            raise ConfigError(f"recipes.trainer.num_nodes={static_nodes} must be >= 1")
        return [static_nodes]
    lo, hi, step, values = policy.min_nodes, policy.max_nodes, policy.replica_increment_step, policy.replica_discrete_values
    if lo < 1:
        raise ConfigError(f"{key}.min_nodes={lo} must be >= 1")
    if lo > hi:
        raise ConfigError(f"{key}.min_nodes={lo} is greater than max_nodes={hi}: lower min_nodes or raise max_nodes")
    if step is not None and values is not None:
        raise ConfigError(f"{key} sets both replica_increment_step={step} and replica_discrete_values={values}: keep one")
    if values is not None:
        if not values:
            raise ConfigError(f"{key}.replica_discrete_values is empty: list the node counts to allow, or remove it")
        outside = [v for v in values if not lo <= v <= hi]
        if outside:
            raise ConfigError(f"{key}.replica_discrete_values={values} has {outside} outside [min_nodes={lo}, "
                              f"max_nodes={hi}]: remove them or widen the range")
        sizes = sorted(set(values))
    elif step is not None:
        if step < 1:
            raise ConfigError(f"{key}.replica_increment_step={step} must be >= 1")
        if (hi - lo) % step:
            raise ConfigError(f"{key}.replica_increment_step={step} never reaches max_nodes={hi} from min_nodes={lo}: "
                              f"use a step dividing {hi - lo} or set max_nodes={lo + (hi - lo) // step * step}")
        sizes = list(range(lo, hi + 1, step))
    else:
        sizes = sorted(n for n in scale_counts if lo <= n <= hi)
        if not sizes and not every_size:
            raise ConfigError(f"{key}: no scale_config entry inside [min_nodes={lo}, max_nodes={hi}] (entries: "
                              f"{sorted(scale_counts)}): set replica_increment_step or replica_discrete_values")
    return list(range(lo, hi + 1)) if every_size else sizes


def _validate_policy(policy: ElasticPolicy, typed: TypedKeys) -> None:
    sizing = sorted(typed.recipe & {f"elastic_policy.{key}" for key in ("min_nodes", "max_nodes", "replica_increment_step",
                                                                        "replica_discrete_values")})
    if sizing and not policy.is_elastic:
        raise ConfigError(f"recipes.{sizing[0]} is set but recipes.elastic_policy.is_elastic=false, so it would be "
                          f"ignored: add recipes.elastic_policy.is_elastic=true (or use recipes.trainer.num_nodes)")


def _without(entry: dict, path: str) -> tuple[dict, bool]:
    """`entry` minus the value at dotted `path` (and everything under it); whether anything was there."""
    head, _, rest = path.partition(".")
    if head not in entry:
        return entry, False
    if not rest:
        return {k: v for k, v in entry.items() if k != head}, True
    if not isinstance(entry[head], dict):
        return entry, False
    inner, found = _without(entry[head], rest)
    return ({**entry, head: inner} if found else entry), found


def _apply_typed_keys(entries: dict[int, dict], typed: TypedKeys) -> tuple[dict[int, dict], list[str]]:
    """Drop from each entry the keys the user typed for the whole recipe, so they hold at every size."""
    notes = []
    for path in sorted(typed.recipe):
        if path.startswith(("scale_config", "elastic_policy")):
            continue
        shadowing = []
        for nodes in sorted(entries):
            if (nodes, path) in typed.entries:
                continue
            entries[nodes], found = _without(entries[nodes], path)
            if found:
                shadowing.append(f"n{nodes}")
        if shadowing:
            notes.append(f"recipes.{path} from the command line replaces scale_config entries "
                         f"{', '.join(shadowing)} (to change one size: recipes.scale_config.n<N>.{path}=...)")
    return entries, notes


def _named_where_set(message: str, where: str, entry: dict) -> str:
    """A message about `<where>.<path>` (a scale_config entry) names `recipes.<path>` instead when the
    entry does not set that path: the value is the recipe's, or the one the user typed for every size."""
    found = re.search(re.escape(where) + r"\.([\w.]+)", message)
    if where == "recipes" or not found or _without(entry, found.group(1))[1]:
        return message
    return message.replace(f"{where}.", "recipes.", 1)


def validate_job_name(name: str, key: str = "cluster.job_name") -> None:
    if len(name) > 63:
        raise ConfigError(f"{key}={name!r} is {len(name)} characters; Kubernetes allows 63: shorten it")
    if not RFC1123_LABEL.match(name):
        raise ConfigError(f"{key}={name!r} is not a valid Kubernetes name (RFC 1123: lowercase letters, digits, '-', "
                          f"starting and ending alphanumeric): e.g. {re.sub(r'[^a-z0-9-]+', '-', name.lower()).strip('-')!r}")


def make_plan(recipe: dict, job_name: str | None = None, every_size: bool = False,
              typed: TypedKeys = TypedKeys(), write_gb_per_s: float | None = None) -> Plan:
    """Validate a resolved recipe and plan every node count its elastic policy allows (with
    `every_size`, every count in [min_nodes, max_nodes]); with the checkpoint `write_gb_per_s`, warn
    where a stop's save outlasts the graceful timeout."""
    recipe = dict(recipe)
    policy = build(ElasticPolicy, recipe.pop("elastic_policy", None), "recipes.elastic_policy")
    hardware = build(Hardware, {key: recipe.pop(key, None) for key in ("instance_types", "model_shape")}, "recipes")
    _validate_policy(policy, typed)
    entries, notes = _apply_typed_keys(normalize_scale_config(recipe.pop("scale_config", None)), typed)
    base_cfg = build(JobConfig, recipe, "recipes")
    hardware = _with_local_shape(hardware, base_cfg.training_config.model_config.model_name_or_path)
    instance = lookup(base_cfg.instance_type)
    job_name = job_name or base_cfg.run.name
    validate_job_name(job_name)

    nodes_list = allowed_sizes(policy, list(entries), base_cfg.trainer.num_nodes, every_size)
    sizes = []
    for nodes in nodes_list:
        entry = entries.get(nodes)
        where = f"recipes.scale_config.n{nodes}" if entry is not None else "recipes"
        entry_nodes = (entry or {}).get("trainer", {}).get("num_nodes", nodes)
        if entry_nodes != nodes:
            raise ConfigError(f"{where}.trainer.num_nodes={entry_nodes} contradicts its key n{nodes}: "
                              f"set it to {nodes} or remove it")
        merged = deep_merge(recipe, entry or {})
        merged["trainer"] = {**merged.get("trainer", {}), "num_nodes": nodes}
        try:
            cfg = build(JobConfig, merged, where)
        except ConfigError as e:
            raise ConfigError(_named_where_set(str(e), where, entry or {})) from None
        check_methods(cfg.training_config)
        mc = cfg.training_config.model_config
        refusal = family_refusal(hardware.model_shape or mc.architecture or {}, cfg.training_config.datasets.packing,
                                 mc.attn_implementation)
        if refusal:
            raise ConfigError(refusal)
        nproc = training_processes(cfg.training_config, cfg.trainer.nproc_per_node or instance.devices_per_node)
        check_rollout_engine(cfg.training_config, nproc, hardware.model_shape or mc.architecture)
        try:
            batch = plan_batches(cfg.training_config.training_args, nodes * nproc,
                                 f"{where}.training_config.training_args")
        except ConfigError as e:
            raise ConfigError(f"at {plural(nodes, 'node')}: {_named_where_set(str(e), where, entry or {})}") from None
        degree, memory = _sharding(hardware, cfg, instance, nodes, nproc, batch, where)
        mc = dataclasses.replace(cfg.training_config.model_config, sharding_degree=degree,
                                 sharding="hsdp" if degree < nodes * nproc else "fsdp")
        cfg = dataclasses.replace(cfg, training_config=dataclasses.replace(cfg.training_config, model_config=mc))
        if memory is not None and memory.rollout_gib is not None:
            check_phases(memory, instance, nodes, cfg.training_config, hardware.model_shape)
        sizes.append(SizePlan(nodes, nproc, cfg, batch, entry is not None, memory))

    first = sizes[0]
    for path in RESUME_INVARIANTS:
        want = get_path(first.config.training_config, path)
        for size in sizes[1:]:
            got = get_path(size.config.training_config, path)
            if got != want:
                raise ConfigError(
                    f"training_config.{path} is {got!r} at {plural(size.nodes, 'node')} but {want!r} at {first.nodes}: "
                    f"a resume at another size would be refused; it must be the same at every size (set it in "
                    f"the recipe, not per scale_config entry)")
    split = {s.nodes: s.nproc_per_node for s in sizes}
    if len(set(split.values())) > 1:
        listed = ", ".join(f"{plural(n, 'node')}: {p}" for n, p in split.items())
        raise ConfigError(f"training_config.training_args.method_args.rollout_ranks_per_node leaves another count of "
                          f"training processes per node at each size ({listed}): torchrun starts one count at every "
                          f"size; set it in the recipe, not per scale_config entry")
    warnings = []
    rates = {s.nodes: s.learning_rate for s in sizes}
    if len(set(rates.values())) > 1:
        listed = ", ".join(f"{plural(n, 'node')}: {lr:g}" for n, lr in rates.items())
        warnings.append(f"learning_rate differs between sizes ({listed}): after a resize the new size's LR "
                        f"governs the schedule from that step on")
    recipe_lr = base_cfg.training_config.training_args.learning_rate
    for nodes, lr in rates.items():
        if entries.get(nodes) and max(lr / recipe_lr, recipe_lr / lr) > 5:
            warnings.append(f"recipes.scale_config.n{nodes} sets learning_rate={lr:g}, {lr / recipe_lr:.3g}x the "
                            f"recipe's {recipe_lr:g}: a LoRA learning rate in full-parameter training (or the reverse)? "
                            f"remove it from the entry to use the recipe's")
    warnings += _hardware_warnings(hardware, instance, sizes) + _stop_save_warnings(policy, hardware, sizes,
                                                                                    write_gb_per_s)
    warnings += _update_share_warnings(sizes)
    unused = tuple(sorted(n for n in entries if n not in nodes_list))
    return Plan(job_name, instance, policy, base_cfg, tuple(sizes), unused, hardware, tuple(warnings), tuple(notes))


def _with_local_shape(hardware: Hardware, model: str | None) -> Hardware:
    """A local model's config.json fills a missing model_shape and checks a given one."""
    model_dir = local_model_dir(model)
    if model_dir is None:
        return hardware
    config = local_config(model_dir)
    if hardware.model_shape:
        check_shape(hardware.model_shape, config, model_dir)
        return hardware
    shape = shape_of(config)
    if readable_shape(shape):  # a family the analytic shape cannot read: no memory figure, as without a shape
        return hardware
    return dataclasses.replace(hardware, model_shape=shape)


def _sharding(hardware: Hardware, cfg: JobConfig, instance: InstanceType, nodes: int, nproc: int, batch: BatchPlan,
              where: str) -> tuple[int, MemoryEstimate | None]:
    """The GPUs the state is sharded over at this size, and the peak memory per GPU with it. Under
    `sharding: auto`, one node's GPUs (HSDP: each layer's gathers stay on the node's NVLink and only
    the gradients cross the network, once per step) wherever that fits under FIT_SHARE, else every
    GPU (FSDP across nodes, where memory needs it, or where the memory is unknown)."""
    mc, world = cfg.training_config.model_config, nodes * nproc

    def memory(degree: int) -> MemoryEstimate | None:
        return _memory(hardware, cfg, instance, degree, batch.micro_batch, batch.grad_accum_steps, degree < world)

    if mc.sharding_degree and world % mc.sharding_degree:
        raise ConfigError(f"{where}.training_config.model_config.sharding_degree={mc.sharding_degree} does not divide "
                          f"the {world} GPUs at {plural(nodes, 'node')}: use a divisor of every allowed size's GPU count (e.g. "
                          f"{nproc}, one node's) or remove it to let the launcher choose")
    if mc.sharding != "auto" or mc.sharding_degree or nodes == 1:
        degree = mc.shard_degree(world, nodes)
        return degree, memory(degree)
    node = memory(nproc)
    if node is not None and node.peak_gib <= FIT_SHARE * instance.gpu_memory_gib:
        return nproc, node
    return world, memory(world)


def _memory(hardware: Hardware, cfg: JobConfig, instance: InstanceType, shard_degree: int, micro: int,
            grad_accum: int, hsdp: bool) -> MemoryEstimate | None:
    """Peak GiB per GPU with the state sharded over `shard_degree` GPUs (a replica of HSDP holds,
    gathers and reduces what an FSDP job of that many GPUs does: planning.memory.trace_inputs), with
    the allowance for what the trace cannot see."""
    mc, tc = cfg.training_config.model_config, cfg.training_config
    config = hardware.model_shape or mc.architecture
    if not config or not instance.gpus:
        return None
    allowance = Allowance.of(config, tc, hsdp, micro)
    if hardware.model_shape and (kept := traced(trace_inputs(hardware.model_shape, tc, shard_degree, micro, grad_accum),
                                                allowance)):
        return rollout_phases(kept, config, tc, instance)
    try:
        return rollout_phases(fallback_estimate(config, cfg, shard_degree, micro, allowance), config, tc, instance)
    except KeyError as e:
        if not hardware.model_shape:  # an inline architecture may lean on transformers' defaults: no estimate
            return None
        raise ConfigError(f"recipes.model_shape lacks {e}: give hidden_size, num_hidden_layers, intermediate_size, "
                          f"num_attention_heads, num_key_value_heads and vocab_size (the model's config.json)") from None


def kept_policies(tc) -> int:
    """GRPO's older policies each rank keeps for a rollout behind the policy (max_steps_off_policy)."""
    o = sampling_options(tc)
    return o.max_steps_off_policy if o else 0


def fallback_estimate(model_shape: dict, cfg: JobConfig, shard_degree: int, micro: int,
                      allowance: Allowance = Allowance()) -> MemoryEstimate:
    """The analytic estimate (planning.memory.estimate) of one size's config, where no trace is kept."""
    mc, tc = cfg.training_config.model_config, cfg.training_config
    rows, length = micro, tc.datasets.max_len
    if o := sampling_options(tc):  # GRPO's updates: each prompt's completions, prompt + completion long
        rows, length = o.micro_completions or micro * o.num_generations, o.max_prompt_length + completion_budget(o)
    return estimate(ModelShape.from_config(model_shape), shard_degree, rows, length,
                    lora_r=mc.peft_config.r if mc.lora else None, activation_checkpointing=mc.activation_checkpointing,
                    loss_chunk_tokens=mc.loss_chunk_tokens,
                    sequences_per_sample=method_facts(tc.training_args.trainer_type).sequences_per_sample,
                    master_weights=mc.master_weights, kept_policies=kept_policies(tc), allowance=allowance)


def checkpoint_gb(model_shape: dict, mc, kept_policies: int = 0) -> float:
    """A checkpoint's size: the master weights and AdamW's two moments, 12 bytes per trained parameter
    in fp32, 24 in fp64 (under LoRA the adapters only: the frozen base is read from the model's files),
    and GRPO's policies kept for a rollout behind (training.rl.policy_versions), 4 or 8 bytes each."""
    shape = ModelShape.from_config(model_shape)
    master = 8 if mc.master_weights == "fp64" else 4
    per_param = 3 * master + master * kept_policies  # weights and AdamW's two moments, GRPO's kept policies
    return per_param * (shape.lora_params(mc.peft_config.r) if mc.lora else shape.params) / 1e9


def _stop_save_warnings(policy: ElasticPolicy, hardware: Hardware, sizes: list[SizePlan],
                        write_gb_per_s: float | None) -> list[str]:
    """A stop is a blocking save of the weights and AdamW's moments (12 bytes per trained parameter)
    that must end within the graceful timeout, or the pod is killed mid-save; at the checkpoint
    write bandwidth the simulator also assumes (simulate.write_gb_per_s, all nodes together)."""
    if not (hardware.model_shape and policy.use_graceful_shutdown and write_gb_per_s):
        return []
    gb = checkpoint_gb(hardware.model_shape, sizes[0].config.training_config.model_config,
                       kept_policies(sizes[0].config.training_config))
    if gb / write_gb_per_s <= policy.graceful_shutdown_timeout:
        return []
    return [f"a stop saves {gb:,.0f} GB: ~{gb / write_gb_per_s:.0f} s at simulate.write_gb_per_s={write_gb_per_s:g}, "
            f"more than elastic_policy.graceful_shutdown_timeout={policy.graceful_shutdown_timeout}: raise the "
            f"timeout, or the pod is killed mid-save"]


def _update_share_warnings(sizes: list[SizePlan]) -> list[str]:
    """GRPO: update u takes every m-th prompt of the global batch, so a rank holding k < m prompts a
    step has prompts in k of the m updates and runs padding through the others (k/m of its update
    work is real)."""
    options = sampling_options(sizes[0].config.training_config)
    if options is None:
        return []
    m = options.mini_batches
    short = [(s.nodes, min(s.batch.local_batches)) for s in sizes if min(s.batch.local_batches) < m]
    if not short:
        return []
    listed = ", ".join(f"{plural(nodes, 'node')}: {k}" for nodes, k in short)
    return [f"a rank's prompts per step fall below method_args.mini_batches={m} ({listed}): such a rank only pads "
            f"through the updates it has no prompt in; lower mini_batches or max_nodes, or raise train_batch_size"]


def _hardware_warnings(hardware: Hardware, instance: InstanceType, sizes: list[SizePlan]) -> list[str]:
    warnings = []
    if hardware.instance_types and instance.name not in hardware.instance_types:
        warnings.append(f"recipes.instance_type={instance.name} is not one this recipe's scale configs were sized for "
                        f"({', '.join(hardware.instance_types)}): pick one of them, or a scale-config set for "
                        f"{instance.name} with scale_configs@recipes.scale_config=<name> (docs/recipes.md: Instance types)")
    tight = [s for s in sizes if s.memory and s.memory.peak_gib > FIT_SHARE * instance.gpu_memory_gib]
    if tight:
        listed = ", ".join(f"{plural(s.nodes, 'node')}: {s.memory.peak_gib:.0f} GiB" for s in tight)
        warnings.append(f"peak memory per GPU is above {FIT_SHARE:.0%} of the {instance.gpu_memory_gib:g} GiB of "
                        f"{instance.name} ({listed}): lower micro_train_batch_size at those sizes, use "
                        f"activation_checkpointing=full, or raise min_nodes")
    return warnings
