"""Runs on this machine: `action=local` trains a recipe with torchrun (gloo on CPU); `action=rehearse`
drives it through a capacity trace (elastic_launcher.local.rehearse). One local "node" is
`local.nproc_per_node` processes; the trainer is told the node count through ELASTIC_NUM_NODES.

No launcher action leaves a process behind: torchrun dies with the launcher (parent-death signal),
the workers die with torchrun, and Ctrl-C or SIGTERM stops the job gracefully (the workers
checkpoint and exit) within the recipe's graceful_shutdown_timeout, then kills what is left.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from elastic_launcher import ROOT
from elastic_launcher.errors import LauncherError
from elastic_launcher.job import Job
from elastic_launcher.local.progress import Progress, summary
from elastic_launcher.render.configs import config_files, write_files
from elastic_launcher.words import plural
from training.contract.buckets import CHECKPOINT_URI_KEY, check_bucket, checkpoint_steps, is_s3
from training.contract.checkpoint_dirs import latest_checkpoint, step_of
from training.contract.config import JobConfig
from training.contract.config_files import NODE_LOCAL_DIR_ENV, NUM_NODES_ENV
from training.contract.data_formats import RECOGNIZED
from training.contract.records import parse_line, read_records


def _die_with_launcher() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass(frozen=True)
class LocalJob:
    config_dir: Path
    run_dir: Path
    nproc_per_node: int
    python: str = sys.executable  # the interpreter (and so the torch) the job runs on
    extra_env: tuple[tuple[str, str], ...] = ()  # more of the workers' environment
    launcher: str = "torch.distributed.run"  # the module that starts the workers (or training.launch: forked)

    def command(self, nodes: int, stop_at_step: int | None = None, pause_at: list[int] = ()) -> list[str]:
        cmd = [self.python, "-m", self.launcher, "--standalone",
               f"--nproc-per-node={nodes * self.nproc_per_node}", "-m", "training",
               f"--config-dir={self.config_dir}", f"--run-dir={self.run_dir}"]
        cmd += [f"--stop-at-step={stop_at_step}"] if stop_at_step else []
        return cmd + ([f"--pause-at-steps={','.join(map(str, pause_at))}"] if pause_at else [])

    def node_local_dir(self, node: int | str) -> Path:
        """Where emulated node `node` keeps its node-local checkpoint tier (a pod's memory volume)."""
        return self.run_dir / "node-local" / f"node{node}"

    def lose_nodes(self, *nodes: int) -> None:
        """Nodes leave (scale-down) or die: their node-local tier goes with them."""
        for node in nodes:
            shutil.rmtree(self.node_local_dir(node), ignore_errors=True)

    def env(self, nodes: int) -> dict[str, str]:
        # torchrun leaves a directory per launch in TMPDIR: one short directory per run dir under the
        # system's, not the run dir (multiprocessing puts AF_UNIX sockets in TMPDIR, whose paths may
        # not pass 107 characters, and a run dir may be as deep as it likes).
        tmp = Path(tempfile.gettempdir()) / f"elastic-launcher-{hashlib.sha1(str(self.run_dir).encode()).hexdigest()[:12]}"
        tmp.mkdir(parents=True, exist_ok=True)
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        return {**os.environ, NUM_NODES_ENV: str(nodes), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"), "PYTHONUNBUFFERED": "1",
                "TMPDIR": str(tmp), "PYTHONPATH": path,
                NODE_LOCAL_DIR_ENV: str(self.node_local_dir("{node_rank}")),  # the trainer fills in its node
                **dict(self.extra_env)}

    def start(self, nodes: int, stop_at_step: int | None = None, log=None, pause_at: list[int] = ()) -> subprocess.Popen:
        """torchrun in its own session (so a resize can signal the whole job at once), dying with us."""
        return subprocess.Popen(self.command(nodes, stop_at_step, pause_at), env=self.env(nodes), stdout=log,
                                stderr=subprocess.STDOUT if log else None, start_new_session=True,
                                preexec_fn=_die_with_launcher)


def child_pids(pid: int, running: bool = False) -> list[int]:
    """Direct children of `pid` (torchrun's workers), read from /proc; with `running`, only those that
    have not exited (an exited child stays listed until its parent reaps it)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and not (running and fields[0] in "ZX"):
            children.append(int(stat.parent.name))
    return sorted(children)


def _signal_workers(proc: subprocess.Popen, sig: int, grace: float, done) -> bool:
    """Send `sig` to every worker of torchrun `proc`, and to each one it starts meanwhile (a job
    stopped just after its launch), until `done()` or `grace` seconds pass; returns whether done."""
    signalled: set[int] = set()
    deadline = time.monotonic() + grace
    while not done():
        if time.monotonic() > deadline:
            return False
        for pid in set(child_pids(proc.pid, running=True)) - signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            signalled.add(pid)
        time.sleep(0.02)
    return True


def stop_job(proc: subprocess.Popen, grace: float, sig: int = signal.SIGTERM) -> tuple[int, bool]:
    """Ask every worker to checkpoint and exit (`sig`), wait up to `grace` seconds, then kill the
    rest of the job: no worker may start training after the stop. Returns torchrun's exit code and
    whether the job exited within `grace`."""
    if _signal_workers(proc, sig, grace, lambda: proc.poll() is not None):
        return proc.returncode, True
    for pid in child_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait(), False


def stop_workers(proc: subprocess.Popen, grace: float, sig: int) -> bool:
    """Ask every worker to checkpoint and exit (`sig`) and wait up to `grace` seconds for the workers
    alone; kill the job past that. Returns whether they exited in time. A resize ends when its
    workers have exited: the HyperPod agent (and torchrun restarting its own workers) stays up between
    the stop and the next start, so torchrun's own exit is no part of a resize; it goes on in the
    background and is reaped there."""
    if not _signal_workers(proc, sig, grace,
                           lambda: proc.poll() is not None or not child_pids(proc.pid, running=True)):
        stop_job(proc, grace=0)
        return False
    threading.Thread(target=_reap, args=(proc,), name="reap-torchrun", daemon=True).start()
    return True


def _reap(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Terminated(KeyboardInterrupt):
    """SIGTERM to the launcher: stops a local job as Ctrl-C does, gracefully."""


STILL_STOPPING = "still stopping: the workers are saving a checkpoint"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _handling_stops(handler):
    """`handler` for Ctrl-C and SIGTERM inside the block; the handlers before it restored after."""
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM stops a job as Ctrl-C does. Only the first of them raises (Terminated for SIGTERM): a
    second, pressed while the first one's stop is starting, would be raised into the code that stops
    the job and leave it running with no launcher; it is only noted (patient() says more)."""
    def later(signum, frame):
        os.write(sys.stderr.fileno(), f"{STILL_STOPPING}\n".encode())  # not print(): it may interrupt a print

    def first(signum, frame):
        for sig in STOP_SIGNALS:
            signal.signal(sig, later)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    with _handling_stops(first):
        yield


@contextlib.contextmanager
def patient(message: str):
    """While a graceful stop runs, another Ctrl-C or SIGTERM only repeats `message`: leaving then would
    orphan torchrun and a worker halfway through its checkpoint."""
    def remind(signum, frame):
        os.write(sys.stderr.fileno(), f"{message}\n".encode())  # not print(): a handler may interrupt a print

    with _handling_stops(remind):
        yield


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C or SIGTERM inside the block is raised when it ends: a job launched inside is tracked
    by the time the interrupt reaches the code that stops it, never left running unseen."""
    caught: list[int] = []
    with _handling_stops(lambda signum, frame: caught.append(signum)):
        yield
    if caught:  # raised by the handler in place (sigterm_as_interrupt's notes a later signal only)
        handler = signal.getsignal(caught[0])
        if callable(handler):
            handler(caught[0], None)
        raise Terminated if caught[0] == signal.SIGTERM else KeyboardInterrupt


def stop_signal(interrupt: KeyboardInterrupt) -> int:
    """The signal the workers get for the launcher's own: SIGTERM for SIGTERM, SIGINT for Ctrl-C."""
    return signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT


_stdout_gone = False


def say(text: str) -> None:
    """A line for the user on stdout, or on stderr once stdout is gone: with the output piped
    (`| grep ...`), Ctrl-C ends the reader too, and a graceful stop must not die of a broken pipe."""
    global _stdout_gone
    if not _stdout_gone:
        try:
            print(text, flush=True)
            return
        except BrokenPipeError:
            _stdout_gone = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush goes nowhere, quietly
    print(text, file=sys.stderr, flush=True)


def run_dir_of(job: Job) -> Path:
    return Path(job.settings.local.run_dir or job.plan.sizes[0].config.run.output_dir).resolve()


_LOCAL_PATHS = ("model_config.model_name_or_path", "model_config.tokenizer_name_or_path", "datasets.train_data")


def found(value: str) -> str:
    """A relative path that exists from the working directory, else from the project root, made absolute;
    anything else (a name, a hub id, a URI, a path that is nowhere) as it is."""
    if not value or os.path.isabs(value) or "://" in value:
        return value
    return next((str((base / value).resolve()) for base in (Path.cwd(), ROOT) if (base / value).exists()), value)


def localized(config: JobConfig) -> JobConfig:
    """Relative data/model/tokenizer paths, reward files and an agent's environment file made absolute
    (from the working directory, else from the project root, where the shipped recipes' paths live),
    so a local run works from any directory."""
    config = copy.deepcopy(config)
    for path in _LOCAL_PATHS:
        section, key = path.split(".")
        owner = getattr(config.training_config, section)
        value = getattr(owner, key)
        if isinstance(value, str):
            setattr(owner, key, found(value))
    config.training_config.evaluation.tasks = [found(t) for t in config.training_config.evaluation.tasks]
    method_args = config.training_config.training_args.method_args
    if isinstance(method_args, dict):  # GRPO's reward files and an agent's environment, found as the data is
        from training.contract.rewards import located

        if isinstance(method_args.get("rewards"), list):
            method_args["rewards"] = [located(spec, (Path.cwd(), ROOT)) for spec in method_args["rewards"]]
        if isinstance(method_args.get("environment"), str):
            method_args["environment"] = located(method_args["environment"], (Path.cwd(), ROOT))
    return config


def _on_this_machine(config: JobConfig, world: int) -> JobConfig:
    """A sharding degree planned for the recipe's GPU nodes (e.g. hsdp over a p5's 8 GPUs) that does
    not divide this machine's processes becomes FSDP over all of them: a local run is a smoke test of
    the recipe, not of its node layout."""
    mc = config.training_config.model_config
    if not mc.sharding_degree or world % mc.sharding_degree == 0:
        return config
    mc = dataclasses.replace(mc, sharding_degree=None, sharding="fsdp")
    return dataclasses.replace(config, training_config=dataclasses.replace(config.training_config, model_config=mc))


def prepare(job: Job, plan=None, run_dir: Path | None = None) -> LocalJob:
    """Write the per-size configs into <run_dir>/launch/configs (a local run's restarts read its own
    copy, never a later dry run's) with local paths made absolute. No manifest: nothing is submitted."""
    run_dir = run_dir or run_dir_of(job)
    uri = job.plan.base.training_config.checkpoint.uri
    if is_s3(uri):  # before anything is written: the bucket exists and may be listed with these credentials
        check_bucket(CHECKPOINT_URI_KEY, uri)
    if not job.settings.local.resume and (run_dir / "checkpoints").exists():
        raise LauncherError(f"{run_dir}/checkpoints exists and local.resume=false: remove it or pick "
                            f"local.run_dir=<new dir>")
    if not job.settings.local.resume and is_s3(uri) and newest_step(run_dir, uri) is not None:
        raise LauncherError(f"{uri} holds checkpoints and local.resume=false: remove them or point "
                            f"{CHECKPOINT_URI_KEY} at a new prefix")
    plan = plan or job.plan
    nproc = job.settings.local.nproc_per_node
    sizes = tuple(dataclasses.replace(s, config=_on_this_machine(localized(s.config), s.nodes * nproc))
                  for s in plan.sizes)
    local_plan = dataclasses.replace(plan, base=localized(plan.base), sizes=sizes)
    configs = write_files(run_dir / "launch" / "configs", config_files(local_plan), "local.run_dir")
    return LocalJob(configs.resolve(), run_dir, nproc)


def newest_step(run_dir: Path, uri: str | None = None) -> int | None:
    """The newest complete checkpoint's step: in the run directory, or under `checkpoint.uri` in S3."""
    if is_s3(uri):
        return next(reversed(checkpoint_steps(CHECKPOINT_URI_KEY, uri)), None)
    path = latest_checkpoint(run_dir / "checkpoints")
    return step_of(path) if path else None


class OutputRelay:
    """Copies torchrun's output to the terminal and <run_dir>/torchrun.log. After the trainer's own
    one-line error, the rest (torchrun's tracebacks of the failed workers) goes to the log only."""

    def __init__(self, proc: subprocess.Popen, log_path: Path):
        self.error: str | None = None
        self.progress = Progress(log_path.parent)
        self._thread = threading.Thread(target=self._copy, args=(proc.stdout, log_path), daemon=True)
        self._thread.start()

    def _copy(self, stream, log_path: Path) -> None:
        with open(log_path, "ab") as log:
            for raw in stream:
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip("\n")
                if self.error is None and line.startswith("error: "):
                    self.error = line[len("error: "):]
                elif self.error is None:
                    record = parse_line(line) if line.startswith("{") else None
                    if record is not None:
                        if record.get("event") != "node":  # which pod is which node: for cluster logs only
                            say(self.progress.line(record))
                    elif not line.endswith(RECOGNIZED):  # the data's format: the launcher said it before the start
                        say(line)

    def join(self) -> None:
        self._thread.join(timeout=10)


def _resolved_max_steps(run_dir: Path) -> int | None:
    """The schedule's length as the trainer resolved it (max_epochs needs the tokenized data)."""
    starts = [r for r in read_records(run_dir) if r.get("event") == "start"]
    return starts[-1].get("max_steps") if starts else None


def run(job: Job) -> int:
    nodes = job.settings.local.nodes or job.plan.sizes[0].config.trainer.num_nodes
    if job.plan.size(nodes) is None:
        allowed = ", ".join(str(s.nodes) for s in job.plan.sizes)
        raise LauncherError(f"local.nodes={nodes} is not a size this recipe allows ({allowed}): pick one of them")
    local = prepare(job)
    say(f"training {job.plan.job_name} on {plural(nodes, 'local node')} x {plural(local.nproc_per_node, 'process')}; "
        f"run dir {local.run_dir}")
    local.run_dir.mkdir(parents=True, exist_ok=True)
    uri = job.plan.base.training_config.checkpoint.uri
    before = newest_step(local.run_dir, uri)
    deadline = time.monotonic() + job.settings.local.timeout
    with sigterm_as_interrupt():
        try:
            with interrupts_deferred():
                proc = local.start(nodes, log=subprocess.PIPE)
                relay = OutputRelay(proc, local.run_dir / "torchrun.log")
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None:
                stop_job(proc, grace=0)
                raise LauncherError(f"local run exceeded local.timeout={job.settings.local.timeout:g}s and was "
                                    f"killed: raise local.timeout") from None
        except KeyboardInterrupt as interrupt:
            say("stopping: the workers checkpoint and exit ...")
            grace = job.plan.policy.graceful_shutdown_timeout
            with patient(f"{STILL_STOPPING}; waiting up to {grace:g}s before the rest is killed"):
                stop_job(proc, grace, stop_signal(interrupt))
                relay.join()
            step = newest_step(local.run_dir, uri)
            say(f"stopped: {'checkpoint at step ' + str(step) if step else 'no checkpoint yet'} in "
                f"{local.run_dir}; rerun the same command to resume")
            return 130
        relay.join()
    if proc.returncode != 0:
        detail = relay.error or f"torchrun exited with {proc.returncode}"
        raise LauncherError(f"{detail} (full log: {local.run_dir / 'torchrun.log'})")
    step, max_steps = newest_step(local.run_dir, uri), _resolved_max_steps(local.run_dir)
    if step is not None and max_steps is not None and step < max_steps:
        say(f"stopped at step {step} of {max_steps}: checkpoint in {local.run_dir}; rerun the same command to resume")
    elif step is not None and step == before:
        say(f"nothing to train: the run in {local.run_dir} had already reached step {step} of {max_steps}; raise "
            f"recipes.training_config.training_args.max_steps to train on, or set local.run_dir=<new dir> to start "
            f"afresh")
    else:
        say(f"done: {summary(local.run_dir)}")
    return 0
