"""An LLM judge scoring completions (training.contract.judge has its settings, templates and replies).

Calls run in this rank's own threads, up to its share of `max_workers` at once and of the requests
and tokens per minute (the shares of all ranks sum to the recipe's limits), while the rollout goes
on generating. Each call is retried on timeouts, lost connections, 408, 409, 429 and 5xx, backing off
exponentially with jitter or as long as `Retry-After` asks; another 4xx is not retried, and 401/403
(credentials refused) ends the run at the first call. One policy for both clients: the OpenAI SDK and
boto3 are built with their own retries off, so every retry is counted.

Every verdict, failed ones too, is written to the ledger as it arrives (<run dir>/judge_ledger/, a
file per process), keyed by its content (training.contract.judge.verdict_key): a step redone after a
stop, a resize or a lost node takes the verdicts it had without asking the judge again, at any world
size. A checkpoint prunes what no resume from it can need (verdicts of the steps it holds).

With `logging.audit_samples`, every verdict is also kept, never pruned, in <run dir>/judge_verdicts/:
what the judge said over the whole run. A run started with ELASTIC_JUDGE_REPLAY=<another run's
directory> takes that run's verdicts before asking (a rehearsal's fixed-size reference reads the
elastic run's: the same completions get the same verdicts, failed ones too, each asked once).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from training.contract import buckets
from training.contract.judge import (HISTORY, REPLAY_ENV, JudgeRequest, JudgeSettings, UnreadableReply, parse_score,
                                     render, template, verdict_key)
from training.contract.judge_client import REFUSED_STATUSES, CallFailed, ConverseJudge, OpenAIJudge

MAX_BACKOFF_S = 30.0


class Bucket:
    """A per-minute limit as a token bucket (a minute's worth at most): `take(n)` waits until n fit.
    What a call really used is settled afterwards (`settle`)."""

    def __init__(self, per_minute: float):
        self.rate, self.level, self.last = per_minute / 60.0, per_minute, time.monotonic()
        self.capacity, self.lock = per_minute, threading.Condition()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level, self.last = min(self.capacity, self.level + (now - self.last) * self.rate), now

    def take(self, n: float) -> None:
        with self.lock:
            self._refill()
            while self.level < min(n, self.capacity):
                self.lock.wait((min(n, self.capacity) - self.level) / self.rate)
                self._refill()
            self.level -= n

    def settle(self, estimated: float, used: float) -> None:
        with self.lock:
            self.level += estimated - used


@dataclass
class Costs:
    """What the judge did for a step on this rank (summed over ranks into the step's record)."""

    judge_calls: float = 0  # verdicts asked of the judge
    judge_cached: float = 0  # verdicts taken from the ledger (or from a call for the same text in flight)
    judge_retries: float = 0
    judge_failed_timeout: float = 0
    judge_failed_connection: float = 0
    judge_failed_status: float = 0
    judge_failed_unreadable: float = 0
    judge_input_tokens: float = 0
    judge_output_tokens: float = 0
    judge_s: float = 0  # from the step's first request to its last verdict
    judge_wait_s: float = 0  # how long the step waited for verdicts once its completions were drawn
    judge_ledger: float = 0  # verdicts this process holds in the ledger now



def judge_metrics(sums: dict[str, float], dropped: float, ranks: int) -> dict:
    """The judge's account of a step from its Costs summed over ranks: the counts as summed, the
    seconds the ranks' mean; and the completions left out of their group's advantage."""
    return {**{f.name: sums[f.name] / ranks if f.name.endswith("_s") else sums[f.name] for f in fields(Costs)},
            "judge_dropped": dropped}


@dataclass(frozen=True)
class Verdict:
    score: float | None  # None: failed after its retries
    failure: str | None = None  # "<kind>: <detail>", kind timeout | connection | status | unreadable | refused
    step: int = 0


class Ledger:
    """Verdicts by key: read from every file of <dir> at the start, each new one appended to this
    process's own file as it arrives (and, with `history`, to its file there, never pruned).

    With `bucket` (an S3 prefix: where the run's checkpoints are), a restart in a fresh pod keeps them
    too: the files there are read at the start, this process's own is put there at the end of each step
    (`publish`; an object cannot be appended to, and a step's verdicts are all in by then) and after each
    prune. A process killed outright loses from the bucket only the verdicts of the step it was in."""

    def __init__(self, directory: Path, size: str, name: str, history: Path | None = None, bucket: str | None = None):
        self.directory, self.size, self.lock = directory, size, threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{size}-{name}.jsonl"
        self.bucket = f"{bucket.rstrip('/')}/{directory.name}" if bucket else None
        self.s3 = buckets.client(buckets.CHECKPOINT_URI_KEY) if bucket else None
        self.verdicts = {**self._bucket_verdicts(), **read_verdicts(directory)}  # the local copy is the newer
        self.own = sum(1 for _ in open(self.path)) if self.path.exists() else 0
        self._file = open(self.path, "a")
        self.unpublished = False
        self._history = None
        if history is not None:
            history.mkdir(parents=True, exist_ok=True)
            self._history = open(history / self.path.name, "a")

    def get(self, key: str) -> Verdict | None:
        with self.lock:
            return self.verdicts.get(key)

    def add(self, key: str, verdict: Verdict) -> None:
        with self.lock:
            self.verdicts[key] = verdict
            if not self._file.closed:  # a call that outlived its method's size: kept in memory only
                for file in filter(None, (self._file, self._history)):
                    file.write(_line(key, verdict))
                    file.flush()
                self.own += 1
                self.unpublished = True

    def prune(self, step: int, others_too: bool) -> None:
        """Keep what a resume from the checkpoint of `step` can need: the verdicts of later steps.
        `others_too` (one process of the size): fold the files of earlier sizes into this one."""
        with self.lock:
            self.verdicts = {k: v for k, v in self.verdicts.items() if v.step > step}
            kept = self.verdicts if others_too else {k: v for k, v in _read(self.path).items() if v.step > step}
            self._file.close()
            partial = self.path.with_suffix(".partial")
            partial.write_text("".join(_line(k, v) for k, v in kept.items()))
            os.replace(partial, self.path)
            self._publish()  # before the others' files go: a kill in between loses nothing
            if others_too:
                for path in self.directory.glob("*.jsonl"):
                    if not path.name.startswith(f"{self.size}-"):
                        path.unlink(missing_ok=True)
                for uri in self._bucket_files():
                    if not uri.rpartition("/")[2].startswith(f"{self.size}-"):
                        buckets.delete(self.s3, buckets.CHECKPOINT_URI_KEY, uri)
            self.own = len(kept)
            self._file = open(self.path, "a")

    def publish(self) -> None:
        """This process's file put in the bucket, where it changed since it was last put there."""
        with self.lock:
            if self.unpublished:
                self._publish()

    def _publish(self) -> None:
        if self.bucket:
            buckets.put(self.s3, buckets.CHECKPOINT_URI_KEY, f"{self.bucket}/{self.path.name}", self.path.read_bytes())
        self.unpublished = False

    def _bucket_files(self) -> list[str]:
        if not self.bucket:
            return []
        bucket, prefix = buckets.split_uri(self.bucket)
        return [f"s3://{bucket}/{key}" for key in buckets.objects(self.s3, buckets.CHECKPOINT_URI_KEY, self.bucket,
                                                                   f"{prefix}/") if key.endswith(".jsonl")]

    def _bucket_verdicts(self) -> dict[str, Verdict]:
        verdicts = {}
        for uri in sorted(self._bucket_files()):
            verdicts.update(_parse(buckets.get(self.s3, buckets.CHECKPOINT_URI_KEY, uri).decode()))
        return verdicts

    def close(self) -> None:
        self.publish()
        self._file.close()
        if self._history is not None:
            self._history.close()


def read_verdicts(directory: Path) -> dict[str, Verdict]:
    """Every verdict of the files in `directory` (none if it does not exist)."""
    verdicts = {}
    for path in sorted(directory.glob("*.jsonl")):
        verdicts.update(_read(path))
    return verdicts


def _line(key: str, verdict: Verdict) -> str:
    return json.dumps({"key": key, **asdict(verdict)}) + "\n"


def _read(path: Path) -> dict[str, Verdict]:
    return _parse(path.read_text())


def _parse(text: str) -> dict[str, Verdict]:
    """A ledger file's verdicts; a later line of a key wins (a verdict needed again by a later step)."""
    verdicts = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # the last line of a process that was killed while writing it
            continue
        verdicts[entry["key"]] = Verdict(entry["score"], entry["failure"], entry["step"])
    return verdicts


class Judge:
    """The judge of one rank: `submit` a group's completions, get a Future of their scores (None
    where a verdict failed); `costs()` what the step took."""

    def __init__(self, settings: JudgeSettings, rank: int, world_size: int, run_dir: Path, size: str, name: str,
                 audit: bool = False, checkpoint_uri: str | None = None):
        """`size`: an id the processes of this world size share; `name` this process's among them;
        `audit`: keep every verdict in the run's history too; `checkpoint_uri`: where the checkpoints
        are, if in S3 (the ledger is kept beside them)."""
        self.settings, self.template = settings, template(settings.prompt_template)
        workers, rpm, tpm = settings.share(rank, world_size)
        self.client = (ConverseJudge if settings.scheme == "bedrock" else OpenAIJudge)(settings, workers)
        self.requests = Bucket(rpm) if rpm else None
        self.tokens = Bucket(tpm) if tpm else None
        self.ledger = Ledger(run_dir / "judge_ledger", size, name, run_dir / HISTORY if audit else None,
                             checkpoint_uri if buckets.is_s3(checkpoint_uri) else None)
        replay = os.environ.get(REPLAY_ENV)
        self.replayed = read_verdicts(Path(replay) / HISTORY) if replay else {}
        # each step's account, by the step its verdicts are for: a rollout process asks for the next step
        # while the last verdicts of this one are on their way
        self.lock, self.step_costs, self.in_flight = threading.Lock(), defaultdict(Costs), {}
        self.first_request: dict[int, float] = {}
        self.refused: str | None = None  # 401/403: every later call is refused too
        self.last_failure: str | None = None  # the newest verdict that failed: what the step's warning shows
        # The first call goes alone: credentials that are refused cost one call, not a step's worth.
        self.first_call, self.first_answered = True, threading.Event()
        self.queue: queue.Queue = queue.Queue()
        self.threads = [threading.Thread(target=self._work, daemon=True, name="judge")  # a rank that ends
                        for _ in range(workers)]                                          # takes its calls with it
        for thread in self.threads:
            thread.start()

    # --- asking ---
    def submit(self, prompts: list, completions: list[str], columns: dict[str, list], reference, step: int) -> Future:
        """The verdicts of `completions` (each beside its prompt and its row's columns), as one Future
        of a list; `reference(row)` the row's reference answer or None; `step` the step they are for."""
        futures = []
        for row, (prompt, completion) in enumerate(zip(prompts, completions)):
            row_columns = {k: v[row] for k, v in columns.items()}
            request = render(self.template, self.settings, prompt, completion, row_columns, reference(row))
            futures.append(self._verdict(verdict_key(self.settings, request), request, step))
        return _all(futures)

    def _verdict(self, key: str, request: JudgeRequest, step: int) -> Future:
        with self.lock:
            self.first_request.setdefault(step, time.monotonic())
            costs = self.step_costs[step]
            known = self.ledger.get(key)
            if known is None and (replayed := self.replayed.get(key)) is not None:
                known = Verdict(replayed.score, replayed.failure, -1)  # into this run's ledger below
            if known is not None:
                costs.judge_cached += 1
                if known.step < step:  # needed again by a later step: kept as long as that one needs it
                    known = Verdict(known.score, known.failure, step)
                    self.ledger.add(key, known)
                done: Future = Future()
                done.set_result(known)
                return done
            if key in self.in_flight:
                costs.judge_cached += 1
                return self.in_flight[key]
            future = self.in_flight[key] = Future()
            costs.judge_calls += 1
        self.queue.put((key, request, step, future))
        return future

    def _work(self) -> None:
        while (job := self.queue.get()) is not None:
            key, request, step, future = job
            try:
                verdict = self._ask(request, step)
                if not (verdict.failure or "").startswith("refused"):  # fixed credentials ask again
                    self.ledger.add(key, verdict)
            except BaseException as e:  # noqa: BLE001 - surfaces where the step collects it
                verdict = e
            with self.lock:
                self.in_flight.pop(key, None)
            if isinstance(verdict, BaseException):
                future.set_exception(verdict)
            else:
                future.set_result(verdict)

    def _ask(self, request: JudgeRequest, step: int) -> Verdict:
        with self.lock:
            first, self.first_call = self.first_call, False
        if not first:
            self.first_answered.wait()
        try:
            return self._attempts(request, step)
        finally:
            self.first_answered.set()

    def _attempts(self, request: JudgeRequest, step: int) -> Verdict:
        estimated = len(request.text) / 4 + self.settings.sampling_params.max_completion_tokens
        for attempt in range(self.settings.num_retries + 1):
            if self.refused:
                return Verdict(None, self.refused, step)
            if self.requests:
                self.requests.take(1)
            if self.tokens:
                self.tokens.take(estimated)
            used = 0.0
            try:
                text, tokens_in, tokens_out = self.client.ask(request.text)
                used = tokens_in + tokens_out
                with self.lock:
                    self.step_costs[step].judge_input_tokens += tokens_in
                    self.step_costs[step].judge_output_tokens += tokens_out
                return Verdict(parse_score(text, request.reply, self.settings.range), None, step)
            except UnreadableReply as e:
                failed = CallFailed("unreadable", str(e))
            except CallFailed as e:
                failed = e
            finally:
                if self.tokens:
                    self.tokens.settle(estimated, used)
            if failed.kind == "status" and failed.status in REFUSED_STATUSES:
                self.refused = f"refused: {failed}"
                return Verdict(None, self.refused, step)
            if not failed.retried or attempt == self.settings.num_retries:
                break
            with self.lock:
                self.step_costs[step].judge_retries += 1
            backoff = min(MAX_BACKOFF_S, 0.5 * 2 ** attempt) * random.uniform(0.5, 1.0)
            time.sleep(failed.retry_after if failed.retry_after is not None else backoff)
        with self.lock:
            name = f"judge_failed_{failed.kind}"
            setattr(self.step_costs[step], name, getattr(self.step_costs[step], name) + 1)
            self.last_failure = f"{failed.kind}: {failed}"
        return Verdict(None, self.last_failure, step)

    # --- the step's account ---
    def waited(self, seconds: float, step: int) -> None:
        with self.lock:
            self.step_costs[step].judge_wait_s += seconds

    def costs(self, step: int | None = None) -> Costs:
        """What the judge did for `step` (for every step not yet accounted, if None), then forgotten;
        its verdicts are in the bucket from here."""
        self.ledger.publish()
        with self.lock:
            steps = [t for t in self.step_costs if step is None or t == step]
            taken = [self.step_costs.pop(t) for t in steps]
            costs = Costs(**{f.name: sum(getattr(c, f.name) for c in taken) for f in fields(Costs)})
            first = [self.first_request.pop(t) for t in steps if t in self.first_request]
            if first:
                costs.judge_s = time.monotonic() - min(first)
            costs.judge_ledger = self.ledger.own
        return costs

    def checkpointed(self, step: int, first: bool) -> None:
        self.ledger.prune(step, first)

    def close(self, timeout: float = 0.0) -> None:
        """Each worker ends after the calls queued before it; `timeout`: seconds to wait for them, so
        that their verdicts reach the ledger before it closes."""
        for _ in self.threads:
            self.queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.ledger.close()

    def drain(self, timeout: float) -> None:
        """End at a stop: the calls on their way finish (up to `timeout` seconds) into the ledger, where
        the restart that draws the same completions finds them; the calls still queued are not asked."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.queue.get_nowait()
        self.close(timeout)


def _all(futures: list[Future]) -> Future:
    """One Future of every verdict of `futures`, in order."""
    combined: Future = Future()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            left[0] -= 1
            if left[0]:
                return
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            combined.set_exception(errors[0])
        else:
            combined.set_result([f.result() for f in futures])

    if not futures:
        combined.set_result([])
    for f in futures:
        f.add_done_callback(one_done)
    return combined
