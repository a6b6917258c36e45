"""The judge's clients (the OpenAI SDK's chat completions, boto3's Converse), one attempt each, and the
probe a local run makes before it starts (training.rl.judge retries and keeps the verdicts).
Torch-free: the launcher asks the judge once through it."""

from __future__ import annotations

import time

from training.contract.errors import ConfigError
from training.contract.judge import KEY, JudgeRequest, JudgeSettings, UnreadableReply, api_key, parse_score

RETRIED_STATUSES = (408, 409, 429)  # and every 5xx
REFUSED_STATUSES = (401, 403)


class CallFailed(Exception):
    """One attempt failed: its kind (timeout, connection, status, unreadable), the HTTP status, and
    how long the server asked to wait."""

    def __init__(self, kind: str, detail: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(detail)
        self.kind, self.status, self.retry_after = kind, status, retry_after

    @property
    def retried(self) -> bool:
        if self.kind in ("timeout", "connection"):
            return True
        return self.kind == "status" and (self.status in RETRIED_STATUSES or (self.status or 0) >= 500)


def _retry_after(headers) -> float | None:
    try:
        value = float((headers or {}).get("retry-after"))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


class OpenAIJudge:
    """openai/<model> through the OpenAI SDK's chat completions, at `base_url`."""

    def __init__(self, settings: JudgeSettings, workers: int):
        import openai

        self.openai, self.settings = openai, settings  # its connection pool (1,000) is more than the workers
        self.client = openai.OpenAI(base_url=settings.base_url, api_key=api_key(settings), max_retries=0,
                                    timeout=settings.timeout)

    def ask(self, text: str) -> tuple[str, int, int]:
        s, openai = self.settings.sampling_params, self.openai
        extra = {k: v for k, v in (("top_p", s.top_p), ("reasoning_effort", s.reasoning_effort)) if v is not None}
        try:
            reply = self.client.chat.completions.create(
                model=self.settings.model, messages=[{"role": "user", "content": text}], temperature=s.temperature,
                max_completion_tokens=s.max_completion_tokens, **extra)
        except openai.APITimeoutError as e:
            raise CallFailed("timeout", str(e)) from None
        except openai.APIConnectionError as e:
            raise CallFailed("connection", str(e)) from None
        except openai.APIStatusError as e:
            message = e.message.removeprefix(f"Error code: {e.status_code} - ")  # the SDK's, said once
            raise CallFailed("status", f"{e.status_code} {message}"[:200], e.status_code,
                             _retry_after(e.response.headers)) from None
        usage = reply.usage
        return (reply.choices[0].message.content or "", getattr(usage, "prompt_tokens", 0) or 0,
                getattr(usage, "completion_tokens", 0) or 0)


class ConverseJudge:
    """bedrock/<model id> through boto3's bedrock-runtime Converse, with the pod's AWS credentials."""

    def __init__(self, settings: JudgeSettings, workers: int):
        import boto3
        from botocore import exceptions
        from botocore.config import Config

        self.settings, self.exceptions = settings, exceptions
        config = Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=settings.timeout,
                        connect_timeout=min(settings.timeout, 10.0), max_pool_connections=workers)
        self.client = boto3.client("bedrock-runtime", region_name=settings.aws_region_name,
                                   endpoint_url=settings.base_url, config=config)

    def ask(self, text: str) -> tuple[str, int, int]:
        s, exceptions = self.settings.sampling_params, self.exceptions
        inference = {"maxTokens": s.max_completion_tokens, "temperature": s.temperature,
                     **({"topP": s.top_p} if s.top_p is not None else {})}
        extra = {"serviceTier": {"type": self.settings.service_tier}} if self.settings.service_tier else {}
        try:
            reply = self.client.converse(modelId=self.settings.model, inferenceConfig=inference,
                                         messages=[{"role": "user", "content": [{"text": text}]}], **extra)
        except exceptions.ClientError as e:
            meta = e.response.get("ResponseMetadata", {})
            error = e.response.get("Error", {})
            raise CallFailed("status", f"{meta.get('HTTPStatusCode')} {error.get('Code')}: {error.get('Message')}"[:200],
                             meta.get("HTTPStatusCode"), _retry_after(meta.get("HTTPHeaders"))) from None
        except (exceptions.ReadTimeoutError, exceptions.ConnectTimeoutError) as e:
            raise CallFailed("timeout", str(e)) from None
        except exceptions.EndpointConnectionError as e:
            raise CallFailed("connection", str(e)) from None
        texts = [block["text"] for block in reply["output"]["message"]["content"] if "text" in block]
        usage = reply.get("usage", {})
        return "".join(texts), usage.get("inputTokens", 0), usage.get("outputTokens", 0)


PROBE_RETRIES = 2  # a server that is down stays down: the probe does not wait out num_retries' backoff


def _why_failed(failed: CallFailed) -> str:
    """What a failed call says of the judge, and what to change."""
    if failed.kind in ("timeout", "connection"):
        return f"cannot be reached ({failed.kind}: {failed}): start it, or point {KEY}.base_url at it"
    if failed.status == 404:
        return f"has no such model ({failed}): set {KEY}.model_id to a model it serves"
    if failed.status in REFUSED_STATUSES:
        return f"refused the credentials ({failed}): check {KEY}.api_key_env (or the pod's AWS role)"
    return f"answered {failed}"


def probe(settings: JudgeSettings, request: JudgeRequest) -> None:
    """Before a local run trains: the judge asked once, as a step would ask it, so that a server that
    cannot be reached, a model it does not serve or a reply the template cannot read is one line
    before anything trains, not a run whose every verdict is dropped."""
    client = (ConverseJudge if settings.scheme == "bedrock" else OpenAIJudge)(settings, 1)
    for attempt in range(PROBE_RETRIES + 1):
        try:
            text, _, _ = client.ask(request.text)
            break
        except CallFailed as failed:
            if not failed.retried or attempt == PROBE_RETRIES:
                raise ConfigError(f"{KEY}: the judge {settings.label} {_why_failed(failed)}") from None
            time.sleep(failed.retry_after if failed.retry_after is not None else 0.5 * 2 ** attempt)
    try:
        parse_score(text, request.reply, settings.range)
    except UnreadableReply:
        asked = "a JSON object with a numeric score" if request.reply == "json" else "a number"
        raise ConfigError(f"{KEY}: the judge {settings.label} answered {text[:120]!r} where the template "
                          f"{settings.prompt_template!r} asks for {asked} (reply: {request.reply}): use a template "
                          f"whose reply the judge gives, or a judge that follows it") from None
