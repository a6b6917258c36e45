"""One world size of training: restart -> this size's config -> resume -> steps -> (elastic event) save.

`Trainer` is built at the live world size (the restart half: config, process group and mesh,
sharded model and optimizer resumed from the newest checkpoint, batch plan, sampler position);
`Trainer.train` is the loop: one step, log, maybe save, stop when every rank agrees. What outlives
a size is the process's (training.runtime.process); the process's life around one or more sizes is
training.worker's.
"""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

from training.batches import step_counts
from training.contract.batching import BatchPlan, plan_batches
from training.contract.checkpoint_dirs import step_name
from training.contract.config import TrainingArgs, load_job_config
from training.contract.config_files import select_config_file
from training.contract.data_formats import RECOGNIZED
from training.contract.errors import ConfigError
from training.contract.rewards import RewardError
from training.data import build_data, describe_drops
from training.doctor import check_gpu_image
from training.evaluate.during_training import CheckpointEvaluations
from training.export import export_run
from training.methods import load_method
from training.methods.base import MethodStep, RunInfo
from training.model.causal_lm import build_sharded_model, check_model, weights_from
from training.model.flops import attention_flops, matmul_flops_per_token
from training.model.lora import checkpointed_weights
from training.model.optimizer import build_optimizer
from training.run_config import as_run
from training.runtime.agent import AgentProgress, disagreement
from training.runtime.elastic import FAULT, finishing_fits
from training.runtime.metrics import (MetricsLogger, host_peak_bytes, peak_flops, peak_memory,
                                      reset_peak_memory)
from training.runtime.named_sums import added, packed, unpacked
from training.runtime.process import Process
from training.runtime.snapshot import data_files, model_files
from training.runtime.topology import (GroupFormationError, Topology, collective_timeout, device_mesh,
                                      end_process_group, start_process_group)
from training.state.checkpoint import Checkpointer, CheckpointError, TrainState, fingerprint
from training.state.node_local import NodeLocalTier
from training.state.peer_copies import load_newest, peer_checkpointer
from training.state.sampler import GlobalBatchSampler, step_rows
from training.state.schedule import lr_factor, schedule_change
from training.validation import validate

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata 0.11 noise


class NumericsError(RuntimeError):
    """The loss or gradient norm stopped being finite."""


class StepAbandoned(Exception):
    """A stop ended the step before it was taken (GRPO's, whose rollout is most of a step): in its
    rollout, the weights still the last step's, or between its updates, the weights then belonging to
    no step."""

    def __init__(self, phase: str):
        super().__init__(phase)
        self.phase = phase  # "rollout" or "updates"


ONE_LINE_ERRORS = (ConfigError, CheckpointError, NumericsError, RewardError, GroupFormationError)


class Trainer:
    """One launch of the training job at one world size. Start-up builds each component once, from
    its own section of the config: process group (topology), tracking (`logging`), data (`datasets`),
    checkpointer (`checkpoint`), model and optimizer (`model_config`, `training_args`), then resumes.
    The loaded config is never changed: the config as run is a new object (`as_run`)."""

    def __init__(self, process: Process):
        args, stop = process.args, process.stop
        self.process, self.stop, self.topo = process, stop, Topology.from_env()
        process.sizes += 1
        self.rank0 = self.topo.rank == 0
        self.stopped = False  # set when the loop ends on an agreed stop (its checkpoint saved)
        self.save_s = 0.0  # how long the newest save took: part of what finishing a stopped step costs
        config_path, own_file = select_config_file(args.config_dir, self.topo.nodes)
        loaded = load_job_config(config_path)
        tc = loaded.training_config
        self.plan: BatchPlan = plan_batches(tc.training_args, self.topo.world_size)
        self.run_dir = process.writable(Path(args.run_dir or loaded.run.output_dir),
                                        checkpoints=not loaded.training_config.checkpoint.uri)
        self.stop_at_step = args.stop_at_step
        self.pause_at = {int(s) for s in args.pause_at_steps.split(",") if s}

        self.device = start_process_group(self.topo, collective_timeout(tc.checkpoint.save_timeout))
        self.on_gpu = self.device.type == "cuda"
        if self.on_gpu:  # the image's self-check: a missing compiler or EFA plugin is one line, not a crash later
            mc = tc.model_config
            network = check_gpu_image(self.device, compiles=mc.compile is not False or
                                      mc.attn_implementation == "flex_attention")
            if self.rank0:
                print(network, flush=True)
        # A stop signal during start-up is announced to the peers through the job's rendezvous store.
        stop.attach_store(dist.distributed_c10d._get_default_store(), self.topo.rank, self.topo.world_size)
        self.node_local = NodeLocalTier.from_env(self.topo.node_rank)
        self.source = model_files(tc.model_config, self.topo, self.node_local)  # before the first collective
        check_model(tc.model_config, tc.datasets.packing, self.source)
        degree = tc.model_config.shard_degree(self.topo.world_size, self.topo.nodes)
        if self.topo.world_size % degree:
            raise ConfigError(f"training_config.model_config.sharding_degree={degree} does not divide the world size "
                              f"{self.topo.world_size}: use a divisor of it, e.g. the GPUs of one node")
        self.mesh = device_mesh(self.topo, self.device, degree)
        launch = f"{int(process.started * 1000)}"
        self.log = MetricsLogger.from_config(tc.logging, self.run_dir, self.rank0, asdict(loaded), launch)
        # Every micro-batch, training and evaluation, has the plan's rows and the packed length (or a
        # bucketed one): compiled functions meet one shape (training.batches.BatchShape).
        ds, ta = data_files(tc.datasets, self.topo), tc.training_args  # an S3 train_data: fetched once per node
        self.method = load_method(ta, self.device, self.plan.micro_batch, ds.max_len, ds.packing)
        m = self.method
        tools = json.dumps(m.prompt_tools)  # an agent's: its prompts offer them
        self.data = process.data((ds, tc.model_config, self.source, m.data_format, ta.seed, m.prompt_limit, tools),
                                 lambda: build_data(ds, tc.model_config, self.source, self.run_dir / "data_cache",
                                                    builder=self.topo.local_rank == 0, data_format=m.data_format,
                                                    seed=ta.seed, prompt_limit=m.prompt_limit, tools=m.prompt_tools))
        self._log_data(ds, ta)
        self.cfg = cfg = as_run(loaded, len(self.data.train), self.data.vocab_size, self.data.special_tokens,
                                self.on_gpu)
        tc, ta = cfg.training_config, cfg.training_config.training_args
        self.last_step = min(self.stop_at_step or ta.max_steps, ta.max_steps)
        self.evaluations = CheckpointEvaluations(tc.evaluation, self.run_dir, self.rank0, ta.max_steps)
        self.log.event(event="start", process_start=process.started, same_process=process.sizes > 1,
                       world_size=self.topo.world_size,
                       nodes=self.topo.nodes, config=config_path.name, derived_batch_math=not own_file,
                       per_rank_batch=list(self.plan.local_batches), micro_batch=self.plan.micro_batch,
                       grad_accum=self.plan.grad_accum_steps, max_steps=ta.max_steps, warmup_steps=ta.warmup_steps,
                       max_epochs=ta.max_epochs, run_dir=str(self.run_dir))
        if self.topo.local_rank == 0:  # which pod runs which node rank: `action=logs` reads this line
            print(json.dumps({"event": "node", "node_rank": self.topo.node_rank, "nodes": self.topo.nodes,
                              "time": time.time()}), flush=True)
        if self.rank0:  # the config as run (vocab and schedule resolved): what `python -m training.export` reads
            (self.run_dir / "job_config.yaml").write_text(yaml.safe_dump(asdict(cfg), sort_keys=False))

        if tc.model_config.compile if tc.model_config.compile is not None else self.on_gpu:
            # Compiled kernels are cached on the run's (shared) volume: a restart after a resize reuses them.
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(self.run_dir / "inductor_cache"))
        self.checkpointer = Checkpointer.from_config(tc.checkpoint, self.run_dir, self.topo.rank,
                                                     self.topo.world_size, self.on_gpu,
                                                     checkpointed_weights(tc.model_config), self.node_local)
        self.peer = peer_checkpointer(process, self.topo, self.node_local, tc.checkpoint.peer_steps or 0, self.on_gpu,
                                      checkpointed_weights(tc.model_config))
        if process.agent is None:
            process.agent = AgentProgress(self.checkpointer.where, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        self.agent = process.agent
        self.state = self._model_and_state()
        self.flops_per_token = matmul_flops_per_token(self.model)
        self.peak_flops = peak_flops(self.device)  # None off GPU: no MFU
        run = RunInfo(self.data.tokenizer, self.plan, self.topo.rank, lambda: self.stop.requested, self._agree_stop,
                      tc.model_config.model_name_or_path, self.run_dir,
                      torch.bfloat16 if tc.model_config.mixed_precision == "bf16" else torch.float32,
                      len(self.data.train), tc.datasets.template_kwargs, tc.logging.audit_samples, tc.checkpoint.uri,
                      tc.model_config, self.source, self.topo.nodes, self.state.step, self._prompts_at, ta.max_steps)
        self.method.prepare(self.model, lambda: build_sharded_model(
            tc.model_config, ta.seed, self.mesh, self.on_gpu, resuming=False, source=self.source
        ).requires_grad_(False).eval(), run)

    def _prompts_at(self, step: int, rank: int) -> list[dict]:  # GRPO's rollout processes draw ahead
        consumed = self.state.consumed_samples + (step - self.state.step) * self.plan.global_batch
        return step_rows(self.data.train, self.plan, rank, self.cfg.training_config.training_args.seed, consumed)

    def _log_data(self, ds, ta: TrainingArgs) -> None:
        stats, validation = self.data.stats, self.data.validation
        if ta.eval_steps and not (validation and len(validation)):
            raise ConfigError(f"training_config.training_args.eval_steps={ta.eval_steps} but no validation rows are left "
                              f"(datasets.train_val_split_ratio={ds.train_val_split_ratio:g} of {stats['rows']} rows, "
                              f"and train_data has no validation or test split): lower train_val_split_ratio or set "
                              f"eval_steps=0")
        self.log.event(event="data", **stats)
        if self.rank0 and ds.format == "auto" and stats.get("format", "pairs") not in ("pairs", "messages"):
            print(f"data: {ds.train_data} read as {stats['format']} rows {RECOGNIZED}", file=sys.stderr, flush=True)
        if self.rank0 and stats.get("validation_split"):
            print(f"data: {stats['validation_rows']} validation rows from the {stats['validation_split']} split of "
                  f"{ds.train_data}", file=sys.stderr, flush=True)
        if self.rank0 and describe_drops(stats):
            print(f"warning: {describe_drops(stats)}", file=sys.stderr, flush=True)

    def _model_and_state(self) -> TrainState:
        """The model and optimizer, from the newest complete checkpoint where there is one, and the
        train state to go on from."""
        tc, ta = self.cfg.training_config, self.cfg.training_config.training_args
        agent_restart_point = self.agent.restart_point()
        fp = fingerprint(self.cfg, len(self.data.train))
        source, state, whence = load_newest(self.checkpointer, self.peer, self._build_model, lambda c: c.load(
            self.model, self.optimizer, fp, tc.checkpoint.ignore_fingerprint, self.method.checkpoint_state(self.model)))
        if state is not None:
            # A checkpoint saved for a stop means the job was stopped (resized or restarted); a periodic
            # one that is the newest means the last launch died: a failure.
            cause = "failure" if not state.stopped else "resize" if state.world_size != self.topo.world_size else "restart"
            state.history = [*state.history, {"time": time.time(), "step": state.step, "from": state.world_size,
                                              "to": self.topo.world_size, "cause": cause}]
            tiers = source.loaded_mb_by_tier(self.device)
            self.log.event(event="resume", step=state.step, from_world_size=state.world_size,
                           world_size=self.topo.world_size, consumed_samples=state.consumed_samples,
                           history=state.history, read_mb=tiers, source="peers" if source is self.peer else "durable",
                           **{f"load_{k}_s": round(v, 3) for k, v in source.load_seconds.items()})
            if self.rank0:
                print(f"resumed from {step_name(state.step)} {whence}: "
                      + ", ".join(f"{mb:,.0f} MB from {tier}" for tier, mb in tiers.items() if mb), flush=True)
        schedule = {"max_steps": ta.max_steps, "warmup_steps": ta.warmup_steps}
        if state is not None and state.schedule not in (None, schedule) and self.rank0:
            print(f"warning: {schedule_change(state, ta)}", file=sys.stderr, flush=True)
        resumed = self.checkpointer.location(state.step) if state else None
        if self.topo.local_rank == 0 and source is not self.peer and (why := disagreement(agent_restart_point, resumed)):
            print(f"warning: {why}", file=sys.stderr, flush=True)
        state = replace(state or TrainState(), world_size=self.topo.world_size, fingerprint=fp, schedule=schedule,
                        stopped=False)
        if state.step < self.last_step:
            save_steps = tc.checkpoint.save_steps
            self.checkpointer.check_space(self.model, min(self.last_step, (state.step // save_steps + 1) * save_steps))
        return state

    def _build_model(self, resuming: bool) -> None:
        """The sharded model and its optimizer; logs how long the build took and how far it raised
        each rank's peak host memory (no rank should hold more than its own shards)."""
        tc, ta = self.cfg.training_config, self.cfg.training_config.training_args
        started, peak = time.perf_counter(), host_peak_bytes()
        self.model = build_sharded_model(tc.model_config, ta.seed, self.mesh, self.on_gpu, resuming, self.source)
        self.optimizer = build_optimizer(self.model, ta)
        grown = [None] * self.topo.world_size
        dist.all_gather_object(grown, host_peak_bytes() - peak)
        self.log.event(event="model", seconds=round(time.perf_counter() - started, 3),
                       weights=weights_from(tc.model_config, resuming, self.source), files=self.source,
                       host_peak_growth_gib=[round(b / 2**30, 3) for b in grown])

    def _loader(self):
        from torchdata.stateful_dataloader import StatefulDataLoader

        # The loader only prefetches; its position comes from the sampler's global counter, never from a
        # restored per-rank loader state (which does not survive a resize).
        ds_cfg, ta = self.cfg.training_config.datasets, self.cfg.training_config.training_args
        sampler = GlobalBatchSampler(len(self.data.train), self.plan, self.topo.rank, ta.seed, self.state.consumed_samples)
        workers = ds_cfg.num_workers
        return iter(StatefulDataLoader(self.data.train, batch_sampler=sampler, collate_fn=self.method.collate, num_workers=workers,
                                       pin_memory=self.on_gpu, prefetch_factor=4 if workers else None,
                                       persistent_workers=workers > 0))

    def set_learning_rate(self) -> float:
        """The LR of this step under the live size's config: a function of the global step only, so
        a resize to a size with another LR (or a changed max_steps) takes effect at once."""
        ta = self.cfg.training_config.training_args
        lr = ta.learning_rate * lr_factor(self.state.step, ta)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def on_device(self, values: list[float]) -> torch.Tensor:
        """Host numbers on the device without waiting for it: staged in pinned memory (a fresh block
        of the caching host allocator each time, so a copy still in flight is never overwritten) and
        copied asynchronously. A tensor made from them on the device would be a pageable copy that
        waits for the stream."""
        staged = torch.empty(len(values), dtype=torch.float64, pin_memory=self.on_gpu)
        staged.numpy()[:] = values
        return staged.to(self.device, non_blocking=True)

    def train_step(self, micro_batches: list[dict]) -> tuple[dict, bool, bool, MethodStep]:
        """One step, of one optimizer update (GRPO: as many as its rollout is split into): (metrics
        record, some rank asked to stop, some rank's async save is still writing, the method's step
        for its audit and warnings); StepAbandoned
        when a stop ends it before it is taken (GRPO). Nothing in it
        reads the device before the optimizer step is queued: the token counts and the stop/save
        flags reach the device from pinned memory and are summed over ranks on it, and a non-finite
        global gradient norm skips the update on the device (fused AdamW's `found_inf`), so a
        non-finite loss or gradient never reaches the weights. The flags travel with the loss after
        backward, so a stop signalled during a step is honoured at its end."""
        ta = self.cfg.training_config.training_args
        started = time.perf_counter()
        lr = self.set_learning_rate()
        planned = self.method.updates(self.model, micro_batches, self.state.step)
        if planned is None:
            raise StepAbandoned("rollout")
        tokens, loss_sum, sums, norms = 0, 0, {}, []
        updating = time.perf_counter()
        for done, update in enumerate(planned.updates):
            if done and self._abandon_between_updates(done, len(planned.updates), updating):
                raise StepAbandoned("updates")
            counts = self.on_device(step_counts(update))  # [label, input tokens, squared lengths, samples]
            dist.all_reduce(counts)
            update_loss, update_sums = self.method.forward_backward(self.model, update, counts[0], self.plan.global_batch,
                                                                     documents=counts[3])
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), ta.max_grad_norm, foreach=True)
            grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm  # over every rank
            self.optimizer.found_inf = (~torch.isfinite(grad_norm)).float()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            tokens, loss_sum, sums = tokens + counts, loss_sum + update_loss, added(sums, update_sums)
            norms.append(grad_norm)
        flags = self.on_device([self.stop.requested, self.checkpointer.writing, self.peer.writing])
        names, sums = packed(added(sums, self.method.step_stats(planned)), self.device)
        stats = torch.cat([loss_sum.double().reshape(1), flags, sums])
        dist.all_reduce(stats)
        loss_sum, stop, writing, copying, *totals = stats.tolist()
        grad_norm = sum(float(n) for n in norms) / len(norms)  # the updates' mean
        skipped = not math.isfinite(grad_norm)
        if skipped:
            self.state.skipped_steps += 1
            if self.state.skipped_steps > ta.max_skipped_steps:
                raise NumericsError(
                    f"non-finite loss or gradient norm at step {self.state.step + 1} (loss sum {loss_sum}, grad norm "
                    f"{grad_norm}): stopped before the update, the newest checkpoint is unchanged; lower the "
                    f"learning rate, check the data, or allow skips with training_args.max_skipped_steps")
        self.state.step += 1
        self.state.consumed_samples += self.plan.global_batch
        record = self._step_record(loss_sum, skipped, lr, grad_norm, tokens.tolist(),
                                   time.perf_counter() - started, unpacked(names, totals))
        return record, bool(stop), (bool(writing), bool(copying)), planned

    def _abandon_between_updates(self, done: int, total: int, updating: float) -> bool:
        """Whether an agreed stop abandons the step after `done` of its `total` updates, begun at
        `updating`. The weights now belong to no step: abandoning loses every step since the newest
        checkpoint, so it is only done where finishing the updates and saving would outlast the
        graceful timeout. Each rank votes (0: no stop, 1: finish, 2: abandon) and the largest vote
        holds on every rank."""
        vote = 0.0
        if self.stop.requested:
            if self.on_gpu:
                torch.cuda.synchronize()  # the updates done, not only queued
            fits = finishing_fits(done, total, time.perf_counter() - updating, self.save_s, self.stop.seconds_left())
            vote = 1.0 if fits else 2.0
        return self._largest_over_ranks(vote) == 2.0

    def _step_record(self, loss_sum: float, skipped: bool, lr: float, grad_norm: float, tokens: list[float],
                     elapsed: float, sums: dict[str, float]) -> dict:
        """The metrics record of the step just taken (its fields: training.contract.records)."""
        label_tokens, input_tokens, squared_lengths, _ = tokens
        record = {"step": self.state.step, **self.method.step_metrics(loss_sum, sums, label_tokens, self.plan.global_batch),
                  "lr": lr, "grad_norm": grad_norm, "tokens": int(input_tokens),
                  "label_tokens": int(label_tokens), "tokens_per_s": input_tokens / elapsed,
                  "tokens_per_s_per_device": input_tokens / elapsed / self.topo.world_size, "step_time": elapsed,
                  "world_size": self.topo.world_size, "consumed_samples": self.state.consumed_samples,
                  **peak_memory(self.device)}
        if skipped or not label_tokens or not math.isfinite(loss_sum):
            record["loss"] = None
        if skipped:
            record["skipped"] = True
        if self.peak_flops:
            flops = self.flops_per_token * input_tokens + attention_flops(self.model, squared_lengths)
            if self.method.reference_forwards:  # DPO scores every sequence with its reference too
                flops += self.method.reference_forwards * (matmul_flops_per_token(self.model, forward_only=True) *
                                                           input_tokens + attention_flops(self.model, squared_lengths, True))
            record["mfu"] = flops / elapsed / self.topo.world_size / self.peak_flops
        return record

    def _audit(self, micro_batches: list[dict], planned: MethodStep) -> None:
        ids = [sid for m in micro_batches for sid in m["sample_ids"]]
        gathered = [None] * self.topo.world_size if self.rank0 else None
        dist.gather_object((ids, self.method.audited(planned)), gathered, dst=0)
        if self.rank0:
            extra = {k: [x for _, part in gathered for x in part[k]] for k in gathered[0][1]}
            self.log.samples(self.state.step, self.topo.world_size, [sid for part, _ in gathered for sid in part], **extra)

    def _save(self, blocking: bool, process_goes_on: bool = False) -> None:
        self.checkpointer.save(self.model, self.optimizer, self.state, blocking=blocking, sync_later=process_goes_on,
                               method=self.method.checkpoint_state(self.model))
        self._log_saved()

    def _log_saved(self) -> None:
        if self.checkpointer.last_saved:
            step, seconds = self.checkpointer.last_saved
            self.checkpointer.last_saved, self.save_s = None, seconds
            self.agent.report(step, self.checkpointer.location(step))
            self.method.checkpointed(step)
            self.log.event(event="checkpoint", step=step, seconds=round(seconds, 3),
                           bytes=self.checkpointer.size(step) if self.rank0 else 0)
            self.evaluations.saved(step, self.checkpointer.location(step), self.log)

    def _pause(self) -> None:
        """Wait at this step until the driver releases it or a stop signal arrives (rehearsals)."""
        release = self.run_dir / f"release-{self.state.step}"
        while not release.exists() and not self.stop.requested:
            time.sleep(0.02)

    def train(self) -> int:
        """The loop; returns the process's exit code (see `training.runtime.elastic` for what each means)."""
        tc, ta = self.cfg.training_config, self.cfg.training_config.training_args
        self.batches = loader = self._loader()
        self.model.train()
        if self.stop.enter_training(self._agree_stop):  # a rank was signalled as start-up ended
            self.log.event(event="stop", step=self.state.step, signal=self.stop.signal_name or "peer")
            self.log.close("KILLED")
            self.stopped = True
            return self.stop.exit_code_after_stop()
        while self.state.step < self.last_step:
            micro_batches = [next(loader) for _ in range(self.plan.grad_accum_steps)]
            try:
                record, stopping, (writing, copying), planned = self.train_step(micro_batches)
            except StepAbandoned as e:  # redone after the restart
                return self._stop(abandoned=e.phase)
            if self.process.unsynced is not None:  # the restart is over: the disk's work slows nothing now
                self.process.unsynced.release()
                self.process.unsynced = None
            if tc.logging.audit_samples:
                self._audit(micro_batches, planned)
            if self.state.step % tc.logging.log_every == 0 or self.state.step == self.last_step:
                self.log.log(record)
                reset_peak_memory(self.device)  # the next record's peak is its logging window's
            for warning in self.method.watch(record, planned):
                self.log.event(event="warning", step=self.state.step, message=warning)
            failing = self.method.failing()
            if failing:  # every rank read the same record: all stop here, with this step's checkpoint
                self._save(blocking=True)
                raise RewardError(f"{failing} (step-{self.state.step} checkpointed)")
            if ta.eval_steps and not stopping and (self.state.step % ta.eval_steps == 0 or self.state.step == ta.max_steps):
                self.log.log(validate(self.model, self.method, self.data.validation, self.plan.micro_batch,
                                      self.topo.rank, self.topo.world_size, self.state.step, self.device))
            if self.checkpointer.pending and not writing:  # every rank's background write is done
                self.checkpointer.wait()
                self._log_saved()
            if self.state.step in self.pause_at and not stopping:
                self._pause()
                stopping = self._agree_stop()
            if stopping:
                return self._stop()
            if self.state.step == self.last_step or self.state.step % tc.checkpoint.save_steps == 0:
                self.state.stopped = self.state.step == self.last_step
                self._save(blocking=self.state.stopped)
            if self.peer.due(self.state.step) and not copying:  # the last copy done on every rank
                self.peer.save(self.model, self.optimizer, self.state, method=self.method.checkpoint_state(self.model))
        self.stop.enter_finishing()
        self.checkpointer.wait()
        self.peer.close()
        self._log_saved()
        if ta.save_hf_ckpt and self.state.step == ta.max_steps:
            started = time.perf_counter()
            written = export_run(self.model, self.cfg, self.run_dir, self.rank0, self.source)
            self.log.event(event="export", step=self.state.step, dirs=written, seconds=round(time.perf_counter() - started, 3))
        self.evaluations.finish(self.log)
        for warning in self.method.warnings():  # said as they came, and again where the run ends
            self.log.event(event="warning", step=self.state.step, message=f"this run: {warning}")
        self.log.event(event="exit", step=self.state.step)
        self.log.close("FINISHED" if self.state.step == ta.max_steps else "KILLED")  # --stop-at-step: more to come
        return 0

    def _stop(self, abandoned: str | None = None) -> int:
        """End the loop on an agreed stop: its checkpoint (of the last step taken; none when the step
        was abandoned between its updates), its event, the exit code."""
        self.peer.close()  # a copy in flight finished: no rank leaves its collectives behind
        if abandoned == "updates":
            self.checkpointer.wait()  # a periodic save still writing: the newest checkpoint, the restart's
            self._log_saved()
            newest = self.checkpointer.newest_step()
            resume = f"step {newest}" if newest is not None else "the start"
            if self.rank0:
                print(f"{self.stop.signal_name or 'a peer'}'s stop during step {self.state.step + 1}'s updates: "
                      f"finishing them and saving would outlast the graceful timeout, and the weights belong to no "
                      f"step: exiting without a checkpoint; the restart resumes from {resume}", file=sys.stderr)
        else:
            self.state.stopped = True  # a deliberate end: a resume from it is a restart, not a failure
            # In place, the agent's stop (or a peer's, the agent's own following) keeps this process.
            in_place_stop = self.stop.in_place and self.stop.signal_name in (None, FAULT)
            self._save(blocking=True, process_goes_on=in_place_stop)
        self.log.event(event="stop", step=self.state.step, signal=self.stop.signal_name or "peer",
                       **({"abandoned": abandoned} if abandoned else {}))
        self.log.close("KILLED")
        self.stopped = True
        return self.stop.exit_code_after_stop()

    def _agree_stop(self) -> bool:
        return self._largest_over_ranks(float(self.stop.requested)) > 0

    def _largest_over_ranks(self, value: float) -> float:
        """A collective: the largest of every rank's `value`."""
        largest = torch.tensor([value], device=self.device)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        return largest.item()

    def close(self) -> None:
        """End this world size in a process that goes on (an in-place resize): the stop's checkpoint is
        written, the loader's workers, model, optimizer and process groups are released; the next size
        re-forms the group and reshards from that checkpoint (its node's copy in memory first)."""
        self.checkpointer.close()
        self.process.unsynced = self.checkpointer.unsynced
        del self.batches, self.model, self.optimizer, self.method
        end_process_group()
        gc.collect()
        if self.on_gpu:
            torch.cuda.empty_cache()
