"""Ranks that only generate (`method_args.rollout_ranks_per_node` = k): each node's first training rank
starts k rollout processes of its own (on GPUs, the node's last k devices), which make the node's
experience while the training ranks update, up to `max_steps_off_policy` (s) steps ahead.

The schedule is the one of training.rl.policy_versions: the batch of the step taken after t steps is
drawn by the policy after max(0, t-s) steps. A rollout process keeps the policies it was sent (their
trainable parameters: under LoRA the adapters) and draws each step's prompts, in step order, with the
one the schedule names, so a completion is the one the training ranks would draw themselves (the
trainer's sampler on an unsharded copy of the model, or with `rollout_engine: vllm` a standalone vLLM
engine kept awake and streamed each new policy from that copy: the same tokens, as each completion is
seeded by its coordinates). The policy after t steps is sent before the request of step t+s that
needs it, so a rollout process never waits for a policy it was not yet sent.

Before each step every training rank gathers the policy (FSDP's all-gathers, all ranks at once) and the
node's first sends it on over a process group of its own with its rollout processes (NCCL on GPUs, gloo
on CPU: training.rl.policy_channel), without waiting for them; the node's ranks' prompts of the step s
ahead are requested, and the step's experience is handed from the node's first rank to the others.
In a rollout process one thread generates and another waits for each draw's scores (a judge's last
verdicts, a slow reward), so a step's scoring overlaps the generation of the next one requested.
Nothing of a rollout process is checkpointed: the trainer keeps the policies the next rollouts are
drawn by (as with k = 0), so a restart, at any size and with any k, starts new rollout processes,
sends them those policies, and draws again what was in flight. An LLM judge among the rewards is asked
by the rollout processes (each its share of the judge's limits), whose verdicts go to the run's ledger
in files of their own beside the training ranks': a restart reads them all, and each checkpoint
prunes them too (training.rl.judge.Ledger). At a stop a rollout process lets its judge's calls on their
way finish into the ledger before it exits, so the restart, drawing those completions again, asks none
of them again. The judge's account of an experience travels with it."""

from __future__ import annotations

import dataclasses
import importlib
import os
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from training.rl.policy_channel import PolicyReceiver, PolicySender
from training.runtime.elastic import exit_now, signal_mask_kept

RESULT_POLL_S = 0.05  # how often a rank waiting for its batch checks its stop and its rollout processes
END_TIMEOUT_S = 30  # for the rollout processes to end by themselves after the run's last checkpoint
# At a stop, for a rollout process's judge calls on their way to finish: their verdicts reach the ledger, and
# the restart, which draws the same completions, does not ask again (after a SIGKILL it does)
DRAIN_TIMEOUT_S = 10
STOP_POLL_S = 0.1


@dataclasses.dataclass(frozen=True)
class RolloutSetup:
    """What a rollout process builds its model and its experience maker from (pickled to it)."""

    model_config: object  # training.contract.config.ModelConfig
    source: str | None  # the model's files, or None: an inline architecture (the weights come from the trainer)
    options: object  # the GRPO method's Args
    seed: int
    tokenizer: object
    template_kwargs: dict | None
    prompt_tools: list[dict] | None
    epoch_rows: float
    run_dir: Path
    engine_files: Path | None  # vLLM's: the tokenizer and an inline architecture's config (training.rl.engines)
    judge: "RolloutJudge | None" = None


@dataclasses.dataclass(frozen=True)
class RolloutJudge:
    """How a node's rollout processes ask the LLM judge: its settings, the run's ledger (the files of
    this size, `size`), and the node's place among the job's nodes (each process's share of the
    judge's workers and rate limits: the job's rollout processes share them)."""

    settings: object  # training.contract.judge.JudgeSettings
    size: str
    node: int
    nodes: int
    audit: bool
    checkpoint_uri: str | None


# --- in the training processes ---
@dataclasses.dataclass
class Spawned:
    """A node's rollout processes, started by its first training rank as soon as its method is built (their
    imports overlap the trainer's own start), each with its inbox and the announcements of its policies;
    one queue brings their results."""

    processes: list
    inboxes: list
    announcements: list
    results: object
    # set at close: each process drains its judge's calls and exits (a flag in shared memory: a
    # multiprocessing Event's set() waits for every waiter to wake, and one that has exited never does)
    stopping: object
    channel: PolicySender  # the policies' way to them

    @classmethod
    def start(cls, count: int, training_ranks_per_node: int, on_gpu: bool) -> "Spawned":
        context = torch.multiprocessing.get_context("spawn")
        spawned = cls([], [], [], context.Queue(), context.RawValue("b", 0), PolicySender(count, on_gpu))
        with signal_mask_kept():
            for i in range(count):
                inbox, announcements = context.Queue(), context.Queue()
                device = f"cuda:{training_ranks_per_node + i}" if on_gpu else "cpu"  # the node's last devices
                process = context.Process(target=serve, args=(device, (i, count), inbox, announcements,
                                                              spawned.channel.address, spawned.results,
                                                              spawned.stopping, os.getpid()))
                process.start()
                spawned.processes.append(process)
                spawned.inboxes.append(inbox)
                spawned.announcements.append(announcements)
        return spawned

    def close(self) -> None:
        """The rollout processes ended: each lets its judge's calls on their way finish, then exits; what
        they drew ahead is drawn again after a restart."""
        self.stopping.value = 1
        deadline = time.monotonic() + DRAIN_TIMEOUT_S + 5
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            process.kill()
            process.join(timeout=10)
        self.channel.close()
        for channel in [*self.inboxes, *self.announcements, self.results]:
            channel.cancel_join_thread()  # never wait to flush a message no one will read
            channel.close()


class RolloutRanks:
    """The node's rollout processes, seen from its training ranks (every rank makes every call); the
    node's first training rank holds them (`spawned`)."""

    def __init__(self, spawned: Spawned | None, setup: RolloutSetup, behind: int, ranks_per_node: int, rank: int,
                 first_step: int, last_step: int, prompts_at: Callable[[int, int], list[dict]], params):
        self.behind, self.params, self.prompts_at = behind, params, prompts_at
        self.last_step = last_step  # the schedule's last step (0-based): none is drawn, nor judged, past it
        self.rank, self.first = rank, rank - rank % ranks_per_node  # the node's first training rank
        self.node_ranks = list(range(self.first, self.first + ranks_per_node))
        self.group, _ = dist.new_subgroups(ranks_per_node, backend="gloo")  # hands a step's experience out
        self.owner = rank == self.first
        self.requested = first_step - 1  # the last step whose prompts were sent
        self.sent_policy: int | None = None
        self.processes, self.inboxes = (spawned.processes, spawned.inboxes) if self.owner else ([], [])
        self.results, self.channel = (spawned.results, spawned.channel) if self.owner else (None, None)
        self.announcements = spawned.announcements if self.owner else []
        for inbox in self.inboxes:
            inbox.put(("setup", setup))
        self.pending: dict[int, dict[int, object]] = defaultdict(dict)  # step -> rank -> its experience

    def send_policy(self, model, policy_step: int, everything: bool = False) -> float:
        """Gather the model's policy (every rank: FSDP's all-gathers) and send it to the rollout processes
        as the policy after `policy_step` steps: its trainable parameters, or `everything` (a start's)."""
        if policy_step == self.sent_policy:
            return 0.0
        started = time.perf_counter()
        weights = {}
        for name, p in model.named_parameters():
            if everything or p.requires_grad:
                full = p.full_tensor() if hasattr(p, "full_tensor") else p  # a collective: every rank
                if self.owner:  # a copy of its own (a replicated DTensor's is the parameter): the send is not waited for
                    weights[name] = full.detach().clone()
        if self.owner:
            self.channel.wait_formed(self.alive)
            announced = self.channel.send(weights)
            for announcements in self.announcements:
                announcements.put((policy_step, announced))
        self.sent_policy = policy_step
        return time.perf_counter() - started

    def checkpointed(self, step: int) -> None:
        """The checkpoint of `step` is complete: the rollout processes prune their judge's ledger. After
        the schedule's last step (nothing is left to draw) they end once they have, so the run's ledger
        ends as its last checkpoint leaves it."""
        for inbox in self.inboxes:
            inbox.put(("checkpointed", step))
        if step > self.last_step:
            for inbox in self.inboxes:
                inbox.put(("end",))
            for process in self.processes:
                process.join(timeout=END_TIMEOUT_S)  # past it, close() kills what is left

    def request_through(self, step: int) -> None:
        """The node's prompts of every step up to `step` requested (steps in order; the first rank's)."""
        while self.requested < step:
            self.requested += 1
            if self.owner:
                for i, rank in enumerate(self.node_ranks):
                    self.inboxes[i % len(self.inboxes)].put(
                        ("draw", self.requested, max(0, self.requested - self.behind), rank,
                         self.prompts_at(self.requested, rank), self.params))

    def experience(self, step: int, stopped: Callable[[], bool]):
        """This rank's experience of `step` (requesting the steps up to s ahead); None when a stop came first."""
        self.request_through(min(step + self.behind, self.last_step))
        mine = None
        if self.owner:
            while len(self.pending[step]) < len(self.node_ranks) and not stopped():
                self._receive()
            mine = self.pending.pop(step) if len(self.pending[step]) == len(self.node_ranks) else {}
        handed = [None]
        dist.scatter_object_list(handed, [mine.get(r) for r in self.node_ranks] if self.owner else None,
                                 src=self.first, group=self.group)
        return handed[0]

    def alive(self) -> None:
        """Raises when one of the node's rollout processes has died."""
        dead = [p for p in self.processes if not p.is_alive()]
        if dead:
            raise RuntimeError(f"a rollout process of training rank {self.rank} exited with code "
                               f"{dead[0].exitcode}: its log lines are above; the restart draws its work again")

    def _receive(self) -> None:
        try:
            kind, step, rank, payload = self.results.get(timeout=RESULT_POLL_S)
        except queue.Empty:
            self.alive()
            return
        if kind == "error":  # a reward's own error (RewardError: one line) as raised, any other described
            raise payload if isinstance(payload, Exception) else RuntimeError(payload)
        self.pending[step][rank] = payload



# --- in a rollout process ---
def serve(device: str, place: tuple[int, int], inbox, announcements, channel, results, stopping, parent: int) -> None:
    """A rollout process's loop, until its training rank sets `stopping` (or dies): build from the setup it
    is sent, take the policies sent over `channel` (training.rl.policy_channel), draw what is requested
    with the one it names (its reward process dies with it). `place`: this process's index among its
    node's rollout processes, and their count."""
    from training.runtime.elastic import die_with_parent

    die_with_parent(parent)  # a training rank that dies, however, takes its rollout processes with it
    if device.startswith("cuda"):  # this device alone, as the process's first: vLLM's executor takes that one
        index = int(device.split(":")[1])
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = visible.split(",")[index] if visible else str(index)
        device = "cuda:0"
    receiver = PolicyReceiver(channel, place[0] + 1, torch.device(device), announcements)
    built = []  # the judge, once built: a stop drains its calls
    threading.Thread(target=exit_when_set, args=(stopping, built), daemon=True, name="stopping").start()
    try:
        importlib.import_module("training.model.causal_lm")  # the heavy imports, while the trainer starts too
        _, setup = inbox.get()
        maker, model = rollout_maker(setup, torch.device(device), place)
        policy_changed = getattr(maker.engine, "policy_changed", None)  # an engine that holds its own weights
        judge = maker.rewards.judge
        built.append(judge)
        drawn = queue.Queue()  # to the thread that waits for their scores, in the order drawn
        scorer = threading.Thread(target=score_draws, args=(maker, drawn, results), daemon=True, name="scores")
        scorer.start()
        loaded, idle_s = None, 0.0
        while True:
            waiting = time.perf_counter()
            message = inbox.get()
            idle_s += time.perf_counter() - waiting
            if message[0] == "checkpointed":
                if judge is not None:
                    judge.checkpointed(message[1], first=False)
                continue
            if message[0] == "end":  # the run's last checkpoint was pruned above: the judge's ledger closed
                drawn.put(None)
                scorer.join()
                maker.rewards.close()
                exit_now(0)  # no interpreter teardown of an engine and its helpers to wait for
            _, step, policy_step, rank, prompts, params = message
            if loaded != policy_step:
                waiting = time.perf_counter()
                weights = receiver.policy(policy_step)
                idle_s += time.perf_counter() - waiting
                load_policy(model, weights)
                loaded = policy_step
                if policy_changed is not None:
                    policy_changed()
            drawn.put((maker.draw(prompts, setup.options.num_generations, params, step, policy_step), rank, idle_s))
            idle_s = 0.0
    except Exception as e:  # noqa: BLE001 - reported to the training rank, which ends the run with it
        report(results, e)


def score_draws(maker, drawn: queue.Queue, results) -> None:
    """A rollout process's second thread: each draw's experience once its scores are in, in the order
    drawn, while the main thread generates the next (the last verdicts or rewards of a step overlap the
    next step's generation, where it is already requested)."""
    judge, first_rank = maker.rewards.judge, None
    try:
        while (item := drawn.get()) is not None:
            draw, rank, idle_s = item
            experience = maker.scored(draw)
            experience.rollout_idle_s = idle_s
            if judge is not None:  # its account of this experience; the ledger's size counted once a step
                first_rank = rank if first_rank is None else first_rank  # the lowest rank this process serves
                # the step as the judge counts it: the one being taken (training.rl.reward_pool.judge_step)
                experience.judge_costs = dataclasses.asdict(judge.costs(draw.step + 1))
                experience.judge_costs["judge_ledger"] *= rank == first_rank
                experience.judge_failure = judge.last_failure
            results.put(("experience", draw.step, rank, experience))
    except Exception as e:  # noqa: BLE001 - reported to the training rank, which ends the run with it
        report(results, e)


def report(results, error: Exception) -> None:
    """A rollout process's failure, to its training rank: a reward's own error (judge.on_failure=stop)
    or a configuration's (vLLM missing, say) as the run's one line, any other with its traceback here."""
    from training.contract.errors import ConfigError
    from training.contract.rewards import RewardError

    if isinstance(error, (RewardError, ConfigError)):
        results.put(("error", -1, -1, error))
        return
    import traceback

    traceback.print_exception(error)
    results.put(("error", -1, -1, f"a rollout process failed: {type(error).__name__}: {error}"))


def exit_when_set(stopping, built: list) -> None:
    """A rollout process's end at its training rank's close, whatever its main thread is doing: the judge's
    calls on their way finish into the ledger first."""
    while not stopping.value:
        time.sleep(STOP_POLL_S)
    if built and built[0] is not None:
        built[0].drain(DRAIN_TIMEOUT_S)
    exit_now(0)


def rollout_maker(setup: RolloutSetup, device: torch.device, place: tuple[int, int] = (0, 1)):
    """The unsharded model (its weights come with the first policy) and an experience maker over it."""
    from training.model.causal_lm import plain_model
    from training.rl.experience import ExperienceMaker
    from training.rl.reward_pool import RewardPool
    from training.rl.rollout import ShardedModelRollout
    from training.contract.rewards import DEFAULT_REWARDS, RewardOptions

    o = setup.options
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = plain_model(setup.model_config, setup.source, device)
    rewards = RewardPool(o.rewards or DEFAULT_REWARDS, o.reward_weights, RewardOptions(o.answer_key, o.format_pattern),
                         o.reward_timeout)
    if (j := setup.judge) is not None:
        from training.rl.judge import Judge

        index, count = place
        process = j.node * count + index  # among the job's rollout processes, which share the judge's limits
        rewards.judge = Judge(j.settings, process, j.nodes * count, setup.run_dir, j.size, f"rollout{process}",
                              audit=j.audit, checkpoint_uri=j.checkpoint_uri)
    if o.rollout_engine == "vllm":
        from training.rl.engines import rollout_process_vllm_engine

        engine = rollout_process_vllm_engine(model, setup, device)
    else:
        engine = ShardedModelRollout(model, device, setup.seed)
    environments = None
    if o.environment:
        from training.rl.engines import agent_engine

        engine, environments = agent_engine(engine, setup.tokenizer, setup.template_kwargs, o, setup.prompt_tools,
                                            rewards)
    return ExperienceMaker(engine, rewards, setup.tokenizer, setup.epoch_rows, environments, o.on_tool_timeout), model


def load_policy(model, weights: dict[str, torch.Tensor]) -> None:
    """The policy's parameters into the unsharded model, in the dtype each computes in."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in weights:
                p.copy_(weights[name])
