"""An agent's turns through the model's own chat template, token in and token out: the prompt rendered
with the tools offered, and each tool reply rendered as the template's tool turn and tokenized alone,
to be appended to the tokens the model generated (never re-tokenizing what it said: verl found that
re-rendering a conversation can keep even single-turn PPO from converging).

A reply's tokens are what the template writes between the end of the model's turn and the start of
its next: the rendering of the conversation with the replies and the next generation prompt, less
the rendering without them. The model's turn ends on its stop token (`<|im_end|>`, `<|eot_id|>`,
`<|call|>`); what the template writes after that token (Qwen's newline) opens the reply.

Torch-free: the launcher's dry run checks a template here before anything starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from training.contract.errors import ConfigError
from training.contract.tool_calls import RESPONSE_TEMPLATE, ToolCall, format_of, from_response, parse

PROBE_REPLY = "probe-reply-7f3a"


@dataclass(frozen=True)
class ToolReply:
    name: str
    content: str
    # ok | error (a call the tool could not take; the model sees the error) | raised (the tool raised; the
    # model sees the error, and the environment's failures are watched) | timeout (the trajectory ends)
    status: str = "ok"


def assistant_message(calls: list[ToolCall]) -> dict:
    """The model's turn as the template renders a turn with tool calls (only the part after it is used)."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": f"call_{k}", "type": "function",
                            "function": {"name": c.name or "unknown", "arguments": dict(c.arguments)}}
                           for k, c in enumerate(calls)]}


def tool_messages(calls: list[ToolCall], replies: list[ToolReply]) -> list[dict]:
    return [{"role": "tool", "name": c.name or "unknown", "tool_call_id": f"call_{k}", "content": r.content}
            for k, (c, r) in enumerate(zip(calls, replies))]


class ToolTemplate:
    """The tokenizer's chat template as an agent's rollout uses it."""

    def __init__(self, tokenizer, tools: list[dict], **template_kwargs):
        self.tokenizer, self.tools, self.template_kwargs = tokenizer, tools, template_kwargs
        # transformers' response parsing where the tokenizer declares how; else its family's format
        self.format = RESPONSE_TEMPLATE if getattr(tokenizer, "response_template", None) else \
            format_of(tokenizer.chat_template)

    def calls(self, text: str, before: list[int]) -> list[ToolCall]:
        """The tool calls of one turn of the model's (`before`: the conversation's tokens before it,
        which transformers' response parsing reads)."""
        if self.format == RESPONSE_TEMPLATE:
            prefix = self.tokenizer.decode(before, skip_special_tokens=False)
            return from_response(self.tokenizer, text, prefix, self.tools)
        return parse(text, self.format)

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=self.tools or None, tokenize=False,
                                                  add_generation_prompt=generation_prompt, **self.template_kwargs)

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return self.tokenizer.apply_chat_template(messages, tools=self.tools or None, tokenize=True,
                                                  add_generation_prompt=True, return_dict=True,
                                                  **self.template_kwargs)["input_ids"]

    def reply_text(self, calls: list[ToolCall], replies: list[ToolReply], stop_text: str) -> str:
        """The text the template writes after the model's stop token, through the next turn's opening."""
        context = [{"role": "user", "content": "."}, assistant_message(calls)]
        before = self.render(context, False)
        after = self.render(context + tool_messages(calls, replies), True)
        if not after.startswith(before):
            raise ConfigError("the chat template renders the conversation before a tool reply differently once the "
                              "reply follows (it is not prefix-preserving): an agent's tokens cannot be extended "
                              "turn by turn; use a template that appends each turn")
        end = before.rfind(stop_text) if stop_text else -1
        closing = before[end + len(stop_text):] if end >= 0 else ""  # after the model's stop token
        return closing + after[len(before):]

    def reply_ids(self, calls: list[ToolCall], replies: list[ToolReply], stop_text: str) -> list[int]:
        return self.tokenizer(self.reply_text(calls, replies, stop_text), add_special_tokens=False)["input_ids"]


def check_tool_template(tokenizer, tools: list[dict], key: str, **template_kwargs) -> ToolTemplate:
    """The check (the dry run's and the trainer's) that the chat template can carry an agent: it
    teaches a tool-call format this project reads, it renders the tools into the prompt, and a tool
    reply into a turn of its own. Returns the template, checked."""
    template = ToolTemplate(tokenizer, tools, **template_kwargs)
    name = getattr(tokenizer, "name_or_path", "the tokenizer")
    if template.format is None:
        raise ConfigError(f"{key}: the chat template of {name} teaches no tool-call format this project reads "
                          f"(<tool_call> JSON, <function=...>, Llama 3's JSON, harmony, Gemma 4's) and the tokenizer "
                          f"declares no response_template: set training_config.datasets.chat_template to one that "
                          f"offers tools")
    prompt = template.render([{"role": "user", "content": "."}], True)
    missing = [t["function"]["name"] for t in tools if t["function"]["name"] not in prompt]
    if missing:
        raise ConfigError(f"{key}: the chat template of {name} does not render the tools (no {missing[0]!r} in the "
                          f"prompt it writes with tools=...): set training_config.datasets.chat_template to one "
                          f"that offers tools")
    call = ToolCall(tools[0]["function"]["name"], {})
    if PROBE_REPLY not in template.reply_text([call], [ToolReply(call.name, PROBE_REPLY)], ""):
        raise ConfigError(f"{key}: the chat template of {name} does not render a tool's reply (role 'tool'): set "
                          f"training_config.datasets.chat_template to one that does")
    return template


def reply_content(value) -> str:
    """A tool's return value as the model reads it: text as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)
