"""A conversation's tokens through the model's chat template: labels on the assistant's answers, the
token that closes a turn, and the two conversations of a preference pair."""

from __future__ import annotations

import functools

from training.batches import IGNORE_INDEX
from training.contract.data_formats import as_messages


def turn_end_token(tokenizer, **template_kwargs) -> int | None:
    """The token the chat template closes an assistant turn with (<|im_end|>, <|eot_id|>, <|eot|>,
    the end-of-sentence token, ...), read off a rendered probe; None if nothing follows the answer.
    Rendered once per tokenizer and template arguments, not once per row."""
    return _turn_end_token(tokenizer, tuple(sorted(template_kwargs.items())))


@functools.lru_cache(maxsize=8)
def _turn_end_token(tokenizer, template_items: tuple) -> int | None:
    template_kwargs = dict(template_items)
    probe = "Probe answer."
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Probe?"}, {"role": "assistant", "content": probe}],
                                         tokenize=False, **template_kwargs)
    tail = tokenizer(text[text.rindex(probe) + len(probe):], add_special_tokens=False)["input_ids"]
    return tail[0] if tail else None


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tokenize_chat(messages: list[dict], tokenizer, max_len: int, tools: list[dict] | None = None,
                  **template_kwargs) -> dict:
    """input_ids of the whole conversation; labels equal to input_ids on each assistant answer
    through the token that closes its turn (unless the turn has `weight: 0`), IGNORE_INDEX elsewhere. An answer starts where the
    conversation before it, rendered with the generation prompt, stops matching the whole
    conversation: so templates whose generation prompt opens a reasoning block (R1's "<think>",
    Qwen3's empty one with enable_thinking=false) or that render earlier turns differently
    (Qwen3 drops past reasoning) still label exactly the answer. `tools`: the JSON schemas an agent's
    transcript offered (TRL's `tools` column); its tools' replies are context, as every non-assistant turn."""

    def render(turns, generation_prompt):
        return tokenizer.apply_chat_template(turns, tools=tools, tokenize=True, add_generation_prompt=generation_prompt,
                                             return_dict=True, **template_kwargs)["input_ids"]

    input_ids = render(messages, False)
    labels = [IGNORE_INDEX] * len(input_ids)
    closing = turn_end_token(tokenizer, **template_kwargs)
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or message.get("weight", 1) == 0:  # OpenAI's format: weight 0 is context
            continue
        start = _common_prefix(render(messages[:i], True), input_ids)
        if closing is not None and closing in input_ids[start:]:
            end = input_ids.index(closing, start) + 1
        else:
            end = len(render(messages[: i + 1], False))
        labels[start:end] = input_ids[start:end]
    return {"input_ids": input_ids[:max_len], "labels": labels[:max_len]}


def preference_conversations(row: dict) -> tuple[list[dict], list[dict]]:
    """(chosen, rejected) conversations of a preference row, in the layouts open datasets use:
    `prompt`/`chosen`/`rejected` as text, or `chosen`/`rejected` as whole conversations (with an
    optional `prompt` of text or messages, prepended unless they already start with it)."""
    if "chosen" not in row or "rejected" not in row:
        raise ValueError("a preference row needs 'chosen' and 'rejected' (and optionally 'prompt')")
    prompt = as_messages(row["prompt"], "user", "prompt") if row.get("prompt") is not None else []
    out = []
    for side in ("chosen", "rejected"):
        turns = as_messages(row[side], "assistant", side)
        starts_with_prompt = any(m.get("role") != "assistant" for m in turns[:1] if isinstance(m, dict))
        out.append(turns if starts_with_prompt or not prompt else prompt + turns)
    if _prompt_of(out[0]) != _prompt_of(out[1]):
        raise ValueError("its chosen and rejected conversations have different prompts (the turns before the last "
                         "answer): a preference pair ranks two answers to one prompt")
    return out[0], out[1]


def _prompt_of(conversation: list) -> list:
    """The turns before the conversation's last assistant answer."""
    last = max((i for i, m in enumerate(conversation) if isinstance(m, dict) and m.get("role") == "assistant"),
               default=len(conversation))
    return conversation[:last]
