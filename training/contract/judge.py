"""An LLM judge as a reward (RLAIF): its settings (`method_args.judge`), its prompt templates, the
verdict parsed from a reply, and the checks the dry run makes before anything is written.

The recipe names it `judge` in `method_args.rewards`, alone or beside other rewards. Each completion
is scored by one call: the template rendered with the prompt, the completion and the row's columns,
sent to `model_id` (`bedrock/<model id>`: Bedrock's Converse API with the pod's AWS credentials;
`openai/<model>`: any OpenAI-compatible server at `base_url`). The reply is read as the template
declares (`{% set reply = "json" %}`: an object with a numeric `score`; else the first number in it)
and clamped to `range`. Calls, retries, rate limits, failures and the verdict ledger kept with the
checkpoint are training.rl.judge's. Torch-free: the launcher imports this module.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training.contract.errors import ConfigError
from training.contract.typed import build, one_of, ranged

# A rehearsal's reference run reads the elastic run's verdicts (training.rl.judge): where they are kept
# (under audit_samples, never pruned), and the variable naming the run directory to take them from.
HISTORY = "judge_verdicts"
REPLAY_ENV = "ELASTIC_JUDGE_REPLAY"

KEY = "training_config.training_args.method_args.judge"
NAME = "judge"  # its name in method_args.rewards
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "judge_templates"
SCHEMES = ("bedrock", "openai")
REPLY_SCHEMA = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}


def failed_verdicts(record: dict) -> dict[str, int]:
    """A step record's failed verdicts by kind (timeout, connection, status, unreadable)."""
    return {k.removeprefix("judge_failed_"): int(v) for k, v in record.items() if k.startswith("judge_failed_") and v}


@dataclass(frozen=True)
class JudgeSampling:
    """The judge's own sampling (the vendor's `sampling_params`)."""

    temperature: float = ranged(0.0, ge=0)
    top_p: float | None = ranged(None, gt=0, le=1)
    max_completion_tokens: int = ranged(1024, ge=1)
    reasoning_effort: str | None = None  # OpenAI-compatible reasoning models (gpt-oss): low | medium | high


@dataclass(frozen=True)
class JudgeSettings:
    model_id: str = ""  # bedrock/<model id> | openai/<model name>
    prompt_template: str = "rubric"  # a shipped template (rubric, summary, faithfulness, pairwise) or path/to/file.jinja
    range: list = field(default_factory=lambda: [0.0, 1.0])  # [low, high]: a verdict is clamped into it
    sampling_params: JudgeSampling = field(default_factory=JudgeSampling)
    base_url: str | None = None  # openai/: the server (e.g. http://judge:8000/v1); bedrock/: another endpoint
    api_key_env: str | None = None  # openai/: the environment variable holding the key (cluster.secret_env sets it)
    aws_region_name: str | None = None  # bedrock/: default, the pod's AWS_REGION
    service_tier: str | None = None  # bedrock/: e.g. flex
    max_workers: int = ranged(100, ge=1)  # calls in flight at once, all ranks together
    num_retries: int = ranged(5, ge=0)  # per call: timeouts, connection errors, 408, 409, 429 and 5xx
    timeout: float = ranged(120.0, gt=0)  # seconds per attempt
    requests_per_minute: float | None = ranged(None, gt=0)  # all ranks together
    tokens_per_minute: float | None = ranged(None, gt=0)  # input + output, all ranks together
    on_failure: str = one_of("drop", "zero", "stop")  # a verdict that fails after its retries
    # Steps in a row whose every verdict failed before the run stops (with a checkpoint), whatever
    # on_failure says: dropping a verdict is for a flaky judge, not a dead one.
    max_failed_steps: int = ranged(3, ge=1)

    @property
    def scheme(self) -> str:
        return self.model_id.partition("/")[0]

    @property
    def model(self) -> str:
        return self.model_id.partition("/")[2]

    @property
    def label(self) -> str:
        """The judge as messages name it: its model id and, where given, its server."""
        return self.model_id + (f" at {self.base_url}" if self.base_url else "")

    def share(self, rank: int, world_size: int) -> tuple[int, float | None, float | None]:
        """This rank's workers, requests and tokens per minute: shares that sum to the recipe's limits
        (at least one worker each)."""
        workers = max(1, self.max_workers // world_size + (rank < self.max_workers % world_size))
        per = lambda limit: None if limit is None else limit / world_size  # noqa: E731
        return workers, per(self.requests_per_minute), per(self.tokens_per_minute)


def judge_settings(values: dict | None) -> JudgeSettings:
    """`method_args.judge`, typed and checked: one line naming the key otherwise."""
    if not values:
        raise ConfigError(f"method_args.rewards names {NAME} but {KEY} is not set: give at least its model_id "
                          f"(bedrock/<model id> or openai/<model>) and prompt_template")
    settings = build(JudgeSettings, dict(values), KEY)
    if settings.scheme not in SCHEMES or not settings.model:
        raise ConfigError(f"{KEY}.model_id={settings.model_id!r} names no judge: write bedrock/<model id> (Bedrock's "
                          f"Converse API) or openai/<model> with {KEY}.base_url (an OpenAI-compatible server)")
    if settings.scheme == "openai" and not settings.base_url:
        raise ConfigError(f"{KEY}.model_id={settings.model_id!r} needs {KEY}.base_url: the OpenAI-compatible server's "
                          f"address, e.g. http://my-judge:8000/v1")
    if settings.base_url is not None:
        _check_url(settings.base_url)
    low, high = _range(settings.range)
    if not low < high:
        raise ConfigError(f"{KEY}.range={settings.range!r} is upside down or empty: write [low, high] with low < high")
    if settings.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", settings.api_key_env):
        raise ConfigError(f"{KEY}.api_key_env={settings.api_key_env!r} is not an environment variable's name: name "
                          f"the variable that holds the key (never the key itself)")
    template(settings.prompt_template)  # exists and parses
    return settings


def _check_url(url: str) -> None:
    """An http(s) address with a host: a typo here would otherwise show only in the pods' first step."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a port that is no number, a broken IPv6 address
        valid = False
    if not valid:
        raise ConfigError(f"{KEY}.base_url={url!r} is not an http:// or https:// address with a host: write the "
                          f"server's address, e.g. http://my-judge:8000/v1")


def _range(value) -> tuple[float, float]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise ConfigError(f"{KEY}.range={value!r} must be [low, high], two numbers")
    return float(value[0]), float(value[1])


# --- templates ---------------------------------------------------------------------------------------

def shipped_templates() -> list[str]:
    return sorted(p.stem for p in TEMPLATES_DIR.glob("*.jinja"))


def template_path(name: str) -> Path:
    if (TEMPLATES_DIR / f"{name}.jinja").is_file():
        return TEMPLATES_DIR / f"{name}.jinja"
    path = Path(name)
    if path.suffix == ".jinja" and path.is_file():
        return path.resolve()
    near = difflib.get_close_matches(name, shipped_templates(), n=1)
    raise ConfigError(f"{KEY}.prompt_template={name!r} is neither a template the project ships "
                      f"({', '.join(shipped_templates())}) nor a .jinja file that exists (paths are relative to the "
                      f"directory the job runs in)" + (f": did you mean {near[0]!r}?" if near else ""))


def template(name: str):
    """The Jinja template `name` names: undefined variables are errors, never silently empty."""
    from jinja2 import StrictUndefined, TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    path = template_path(name)
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
    try:
        return env.from_string(path.read_text())
    except TemplateSyntaxError as e:
        raise ConfigError(f"{KEY}.prompt_template={name!r}: {path.name} line {e.lineno}: {e.message}") from None


def template_hash(name: str) -> str:
    return hashlib.sha256(template_path(name).read_bytes()).hexdigest()[:16]


def prompt_text(prompt) -> str:
    """A prompt as the judge reads it: text as it is; chat messages as their last user turn."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content") or "" for m in prompt if m.get("role") == "user"]
    return users[-1] if users else "\n".join(m.get("content") or "" for m in prompt)


@dataclass(frozen=True)
class JudgeRequest:
    """One call: the rendered text the judge is asked, and how its reply is read."""

    text: str
    reply: str  # number | json


def render(tmpl, settings: JudgeSettings, prompt, completion: str, columns: dict, reference: str | None) -> JudgeRequest:
    """The request for one completion. The template sees `prompt` (text), `messages` (a chat prompt's
    turns), `completion`, `reference` (the row's reference answer, where it has one), `low` and
    `high` (the range) and every column of the row by its name."""
    from jinja2 import UndefinedError

    low, high = _range(settings.range)
    context = {**columns, "prompt": prompt_text(prompt), "messages": prompt if isinstance(prompt, list) else [],
               "completion": completion, "low": low, "high": high}
    if reference is not None:
        context["reference"] = reference
    try:
        module = tmpl.make_module(context)
    except UndefinedError as e:
        raise ConfigError(f"{KEY}.prompt_template={settings.prompt_template!r} does not render with the row: {e.message} "
                          f"(it has {', '.join(sorted(context))}): add the column or change the template") from None
    reply = getattr(module, "reply", "number")
    if reply not in ("number", "json"):
        raise ConfigError(f"{KEY}.prompt_template={settings.prompt_template!r} sets reply={reply!r}: "
                          f"set it to \"number\" or \"json\"")
    return JudgeRequest(str(module).strip(), reply)


def verdict_key(settings: JudgeSettings, request: JudgeRequest) -> str:
    """What a verdict is kept under: the judge, its sampling and the text it is asked (which holds the
    template, the prompt, the completion and the columns)."""
    what = [settings.model_id, asdict(settings.sampling_params), settings.service_tier, request.reply, request.text]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


class UnreadableReply(ValueError):
    """The judge answered, but not as the template asks."""


def parse_score(reply_text: str, reply: str, score_range: list) -> float:
    """The verdict in a reply, clamped to the range: the first number (reply: number), or the
    `score` of the JSON object in it (reply: json)."""
    low, high = _range(score_range)
    if reply == "json":
        import jsonschema

        found = re.search(r"\{.*\}", reply_text, re.DOTALL)
        try:
            value = json.loads(found.group(0)) if found else None
            jsonschema.validate(value, REPLY_SCHEMA)
        except (json.JSONDecodeError, jsonschema.ValidationError):
            raise UnreadableReply(f"no JSON object with a numeric score in {reply_text[:80]!r}") from None
        score = float(value["score"])
    else:
        found = re.search(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", reply_text)
        if not found:
            raise UnreadableReply(f"no number in {reply_text[:80]!r}")
        score = float(found.group(0))
    if not math.isfinite(score):
        raise UnreadableReply(f"the score {score} is not finite")
    return min(max(score, low), high)


def check_client(settings: JudgeSettings) -> None:
    """Where the trainer runs here (a local run): the judge's client is installed."""
    import importlib.util

    package = "boto3" if settings.scheme == "bedrock" else "openai"
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f"{KEY}.model_id={settings.model_id}: {package} is not installed here (the training image "
                          f"has it): pip install {package} in this environment, or run the job on the cluster")


def api_key(settings: JudgeSettings) -> str:
    """openai/: the key from the environment variable the recipe names; a server without keys
    (a judge in the cluster) gets a placeholder the SDK requires."""
    if settings.api_key_env is None:
        return "unused"
    value = os.environ.get(settings.api_key_env)
    if not value:
        raise ConfigError(f"{KEY}.api_key_env={settings.api_key_env}: the environment variable is not set: export it "
                          f"(a local run), or reference its Secret with cluster.secret_env.{settings.api_key_env}="
                          f"{{secret: <name>, key: <key>}} (a cluster job)")
    return value


EXAMPLE_COMPLETION = "an example completion"  # what the dry run renders the template with, and asks a local run's judge


def example_requests(settings: JudgeSettings, examples: list[tuple[str, object, dict]], reference) -> list[JudgeRequest]:
    """The template rendered with each of the data's sampled rows (where, prompt, columns) and an
    example completion: the dry run's check that every one renders. `reference(columns)`: the row's
    reference answer or None."""
    tmpl, requests = template(settings.prompt_template), []
    for where, prompt, columns in examples:
        try:
            requests.append(render(tmpl, settings, prompt, EXAMPLE_COMPLETION, columns, reference(columns)))
        except ConfigError as e:
            raise ConfigError(f"{e} (the row at {where})") from None
    return requests


def describe(settings: JudgeSettings, prompts: int, generations: int, largest_world: int, call_tokens: int) -> list[str]:
    """The dry run's lines on the judge: what it is asked per step (the same at every size), its
    concurrency across the ranks, and the least a step waits for its rate limits (a warning where a
    step waits a minute or more). `call_tokens`: a call's tokens at most (prompt, completion, the
    template and the verdict)."""
    calls = prompts * generations
    low, high = _range(settings.range)
    lines = [f"judge: {settings.label} with the {Path(settings.prompt_template).stem} template (range [{low:g}, "
             f"{high:g}], on_failure={settings.on_failure}): {calls} calls per step at every size ({prompts} prompts x "
             f"{generations} completions; a completion judged before, also before a restart, is not asked again), at "
             f"most {settings.max_workers} at once across the ranks"]
    if settings.max_workers < largest_world:
        lines.append(f"warning: {KEY}.max_workers={settings.max_workers} is below the {largest_world} ranks of the "
                     f"largest size: each rank keeps one call in flight, {largest_world} in all")
    waits = []
    if settings.requests_per_minute:
        waits.append((calls / settings.requests_per_minute * 60, f"requests_per_minute={settings.requests_per_minute:g}"))
    if settings.tokens_per_minute:
        waits.append((calls * call_tokens / settings.tokens_per_minute * 60,
                      f"tokens_per_minute={settings.tokens_per_minute:g} (up to {call_tokens} tokens a call)"))
    for seconds, limit in waits:
        line = f"{limit} holds a step at least {seconds:.0f} s for the judge"
        lines.append(f"warning: {line}: raise the limit or lower train_batch_size x num_generations" if seconds >= 60
                     else f"judge: {line}")
    return lines
