"""A judge on loopback for CPU tries and tests, speaking both protocols a recipe's judge may use:
OpenAI's chat completions (POST /v1/chat/completions, for `openai/<model>` with `base_url`) and
Bedrock's Converse (POST /model/<id>/converse, for `bedrock/<id>` with `base_url` as its endpoint).

It judges by a rule a tiny model can learn: the share of digits in the response (the text after the
template's `[Response]`, `[Summary]` or `[Response B]` line, to the next blank line), times the range's high end, in the
reply format the template asks for (a JSON object when the text asks for one, else a bare number).

    python scripts/judge_server.py --port 8011      # then method_args.judge.base_url=http://127.0.0.1:8011/v1

Tests drive it in-process (`JudgeServer`): `faults` scripts the next replies (a status with its
Retry-After, a slow reply, an unreadable one), `api_key` makes it refuse other keys, `models` makes it
answer 404 for other models (as vLLM's server does), `requests` records what it was asked and `peak`
the most requests it answered at once.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECTION = re.compile(r"^\[(Response|Summary|Response B)\]\n(.*?)(?=\n\n|\Z)", re.DOTALL | re.MULTILINE)
HIGH = re.compile(r"to (\d+(?:\.\d+)?) \(")  # the templates' "from <low> (...) to <high> (...)"


def digit_share(text: str) -> float:
    response = SECTION.search(text)
    body = response.group(2) if response else text
    return sum(c.isdigit() for c in body) / max(len(body), 1)


def verdict(text: str) -> str:
    """The rule's reply to a judge prompt, in the format it asks for."""
    high = float(m.group(1)) if (m := HIGH.search(text)) else 1.0
    score = round(digit_share(text) * high, 6)
    return json.dumps({"score": score, "reason": "the share of digits"}) if "JSON" in text else f"{score}"


@dataclass
class Fault:
    """The reply to one request instead of a verdict: an HTTP status (with Retry-After), a delay
    before the verdict, or an unreadable text."""

    status: int | None = None
    retry_after: float | None = None
    delay: float = 0.0
    text: str | None = None


class JudgeServer:
    def __init__(self, port: int = 0, api_key: str | None = None, models: set[str] | None = None):
        self.faults: deque[Fault] = deque()
        self.api_key, self.models, self.requests, self.lock = api_key, models, [], threading.Lock()
        self.in_flight = self.peak = 0  # requests being answered now, and the most at once
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                with server.lock:
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    self._answer()
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                converse = self.path.endswith("/converse")
                if converse:
                    text = "".join(c.get("text", "") for m in body.get("messages", []) for c in m.get("content", []))
                else:
                    text = "".join(m.get("content") or "" for m in body.get("messages", []))
                with server.lock:
                    server.requests.append({"time": time.time(), "path": self.path, "text": text, "body": body})
                    fault = server.faults.popleft() if server.faults else Fault()
                auth = self.headers.get("authorization", "")
                if server.api_key and not converse and auth != f"Bearer {server.api_key}":
                    fault = Fault(status=401)
                if server.models is not None and not converse and body.get("model") not in server.models:
                    message = f"The model `{body.get('model')}` does not exist."
                    return self._reply(404, {"error": {"message": message, "type": "NotFoundError", "code": 404}})
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.status:
                    return self._reply(fault.status, {"error": {"message": f"scripted {fault.status}"},
                                                      "message": f"scripted {fault.status}"},
                                       fault.retry_after, converse)
                answer = fault.text if fault.text is not None else verdict(text)
                tokens_in, tokens_out = len(text) // 4, len(answer) // 4
                if converse:
                    return self._reply(200, {"output": {"message": {"role": "assistant", "content": [{"text": answer}]}},
                                             "stopReason": "end_turn", "metrics": {"latencyMs": 1},
                                             "usage": {"inputTokens": tokens_in, "outputTokens": tokens_out,
                                                       "totalTokens": tokens_in + tokens_out}})
                self._reply(200, {"id": "judge", "object": "chat.completion", "created": int(time.time()),
                                  "model": body.get("model", ""),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": answer}}],
                                  "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                            "total_tokens": tokens_in + tokens_out}})

            def _reply(self, status, payload, retry_after=None, converse=False):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if retry_after is not None:
                    self.send_header("retry-after", f"{retry_after:g}")
                if converse and status >= 400:
                    kind = {403: "AccessDeniedException", 429: "ThrottlingException"}.get(status, "InternalServerException")
                    self.send_header("x-amzn-errortype", kind)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8011)
    args = parser.parse_args()
    with JudgeServer(args.port) as server:
        print(f"judging at {server.url}/v1 (OpenAI) and {server.url} (Converse); Ctrl-C to stop", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
