"""Tool calls read from a model's own output, in its family's format (the one its chat template
teaches), and the format told from the chat template:

- `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen 2.5 and 3, Hermes, the
  R1 distills of Qwen);
- `xml_function`: `<tool_call><function=name><parameter=key>value</parameter></function></tool_call>`
  (Qwen 3.5 and 3.6, Nemotron 3);
- `llama3_json`: a JSON object `{"name": ..., "parameters": {...}}`, after `<|python_tag|>` or alone
  (Llama 3.1-3.3);
- `harmony`: `... to=functions.name ... <|message|>{...}<|call|>` (gpt-oss);
- `gemma4`: `<|tool_call>call:name{key:<|"|>text<|"|>,n:3}<tool_call|>` (Gemma 4).

A tokenizer that declares its own `response_template` is read by transformers' response parsing
instead (`response_template`). A call whose arguments cannot be read is kept with its error: the
model is told, as agents are."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

FORMATS = ("hermes", "xml_function", "llama3_json", "harmony", "gemma4")
RESPONSE_TEMPLATE = "response_template"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)
    error: str | None = None  # why the call could not be read


def format_of(chat_template: str | None) -> str | None:
    """The tool-call format a chat template teaches, or None where it teaches none this reads."""
    text = chat_template or ""
    if "<|tool_call>" in text:
        return "gemma4"
    if "<|call|>" in text or "to=functions" in text:
        return "harmony"
    if "<function=" in text:
        return "xml_function"
    if "<tool_call>" in text:
        return "hermes"
    if "<|python_tag|>" in text or "ipython" in text:
        return "llama3_json"
    return None


def _arguments(name: str, arguments) -> ToolCall:
    """A call of `name` with `arguments` as the model wrote them: an object, or a JSON string of one."""
    if isinstance(arguments, str):  # harmony writes them as text; some models as a JSON string
        try:
            arguments = json.loads(arguments.strip() or "{}")
        except json.JSONDecodeError as e:
            return ToolCall(name, error=f"arguments are not JSON ({e.msg} at {e.pos}): {arguments[:80]!r}")
    if not isinstance(arguments, dict):
        return ToolCall(name, error=f"arguments are not an object: {arguments!r}"[:120])
    return ToolCall(name, arguments)


def _json_call(text: str, arguments_key: str) -> ToolCall:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return ToolCall("", error=f"not JSON ({e.msg} at {e.pos}): {text[:80]!r}")
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ToolCall("", error=f"no tool name in {text[:80]!r}")
    return _arguments(value["name"], value.get(arguments_key, value.get("arguments", {})))


def parse(text: str, fmt: str) -> list[ToolCall]:
    """The tool calls in one turn of the model's text (none: the turn is an answer)."""
    if fmt == "hermes":
        return [_json_call(body.strip(), "arguments")
                for body in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.DOTALL)]
    if fmt == "xml_function":
        calls = []
        for name, body in re.findall(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", text, re.DOTALL):
            arguments = {}
            for key, raw in re.findall(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", body, re.DOTALL):
                try:
                    arguments[key] = json.loads(raw)
                except json.JSONDecodeError:
                    arguments[key] = raw  # a bare string
            calls.append(ToolCall(name, arguments))
        return calls
    if fmt == "llama3_json":
        body = text.split("<|python_tag|>", 1)[1] if "<|python_tag|>" in text else text
        body = body.strip()
        return [_json_call(body, "parameters")] if body.startswith("{") else []
    if fmt == "gemma4":
        return [_gemma4_call(name, body) for name, body in
                re.findall(r"<\|tool_call>call:([\w.-]+)(\{.*?\})(?:<tool_call\|>|$)", text, re.DOTALL)]
    if fmt == "harmony":
        return [_arguments(name, body) for name, body in
                re.findall(r"to=functions\.([\w.-]+).*?<\|message\|>(.*?)(?:<\|call\|>|$)", text, re.DOTALL)]
    raise ValueError(f"unknown tool-call format {fmt!r}: one of {', '.join(FORMATS)}")


def _gemma4_call(name: str, body: str) -> ToolCall:
    """Gemma 4's arguments: an object with bare keys and strings between <|"|> marks, made JSON."""
    strings: list[str] = []

    def kept(match) -> str:
        strings.append(match.group(1))
        return f"\x00{len(strings) - 1}\x00"

    text = re.sub(r'<\|"\|>(.*?)<\|"\|>', kept, body, flags=re.DOTALL)
    text = re.sub(r"([{,\[]\s*)([A-Za-z_][\w-]*)\s*:", r'\1"\2":', text)
    text = re.sub(r"\x00(\d+)\x00", lambda m: json.dumps(strings[int(m.group(1))]), text)
    return _arguments(name, text)


def from_response(tokenizer, text: str, prefix: str, tools: list[dict]) -> list[ToolCall]:
    """The tool calls transformers' response parsing reads from a turn with the tokenizer's own
    `response_template` (`prefix`: the conversation before the turn, as the parser needs it)."""
    try:
        message = tokenizer.parse_response(text, prefix=prefix, tools=tools)
    except ValueError as e:
        return [ToolCall("", error=str(e).splitlines()[0])]
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        calls.append(_arguments(function["name"], function.get("arguments", {})) if isinstance(function.get("name"), str)
                     else ToolCall("", error=f"no tool name in {call!r}"[:120]))
    return calls
