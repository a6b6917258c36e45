"""The row formats SFT data comes in, read as one conversation (or, for `text`, as plain text).

`datasets.format` names one; `auto` (the default) recognizes it from the columns, in this order:

- `messages` (column `datasets.messages_key`): the conversation as written (`role`, `content`,
  optional `weight`);
- `sharegpt` (`conversations` of `from`/`value`): roles mapped, human -> user, gpt -> assistant;
- `alpaca` (`instruction`, `output`; optional `input`, `system`): instruction and input joined as the
  user turn, output the answer;
- `prompt_completion` (`prompt`, `completion`): one exchange, either side text or messages;
- `text` (`text`): plain text, every token trained (continued pre-training).
"""

from __future__ import annotations

from training.contract.errors import ConfigError

FORMATS = ("auto", "messages", "sharegpt", "alpaca", "prompt_completion", "text")
# The trainer's line on a format it recognized (datasets.format: auto); a local run's launcher has said
# how it reads the data before the start, and does not relay it again.
RECOGNIZED = "(recognized from its columns; datasets.format sets it)"
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
                  "system": "system", "tool": "tool", "function_response": "tool", "observation": "tool"}


def required_columns(fmt: str, messages_key: str) -> tuple[str, ...]:
    return {"messages": (messages_key,), "sharegpt": ("conversations",), "alpaca": ("instruction", "output"),
            "prompt_completion": ("prompt", "completion"), "text": ("text",)}[fmt]


def row_format(chosen: str, columns: list[str], messages_key: str, train_data: str) -> str:
    """The format rows are read in: `chosen` if not auto (its columns checked), else the first whose
    columns are all present. One line naming the columns and the formats when none fits."""
    candidates = FORMATS[1:] if chosen == "auto" else (chosen,)
    for fmt in candidates:
        if set(required_columns(fmt, messages_key)) <= set(columns):
            return fmt
    have = ", ".join(columns)
    if chosen != "auto":
        needed = ", ".join(required_columns(chosen, messages_key))
        key = "messages_key" if chosen == "messages" else "format"
        value = messages_key if chosen == "messages" else chosen
        raise ConfigError(f"training_config.datasets.{key}={value!r}: {needed} is not a column of {train_data!r} "
                          f"(columns: {have}); set datasets.format to the format of these rows (auto recognizes it)")
    raise ConfigError(
        f"training_config.datasets.train_data={train_data!r}: its columns ({have}) match no SFT format: "
        f"messages (column datasets.messages_key={messages_key!r}), sharegpt (conversations), alpaca (instruction, "
        f"output), prompt_completion (prompt, completion) or text (text); rename the columns or set "
        f"datasets.messages_key")


def as_messages(value, role: str, field: str) -> list[dict]:
    """A row's field (a prompt, a completion, a preference's side) as messages: text becomes one turn
    of `role`, a message list stays."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list):
        return value
    raise ValueError(f"{field} must be text or a list of messages, got {type(value).__name__}")


def _sharegpt(turns, system) -> list[dict]:
    if not isinstance(turns, list):
        raise ValueError(f"conversations must be a list of {{from, value}}, got {type(turns).__name__}")
    out = [{"role": "system", "content": system}] if system else []
    for i, turn in enumerate(turns):
        role = SHAREGPT_ROLES.get(turn.get("from")) if isinstance(turn, dict) else None
        if role is None:
            raise ValueError(f"conversations[{i}] must be {{from: one of {', '.join(SHAREGPT_ROLES)}, value: <text>}}, "
                             f"got {turn!r}")
        message = {"role": role, "content": turn.get("value")}
        if "weight" in turn and turn["weight"] is not None:
            message["weight"] = turn["weight"]
        out.append(message)
    return out


def _alpaca(row: dict) -> list[dict]:
    for field in ("instruction", "output"):
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise ValueError(f"{field} must be non-empty text")
    extra = row.get("input")
    prompt = row["instruction"] + (f"\n\n{extra}" if isinstance(extra, str) and extra.strip() else "")
    system = [{"role": "system", "content": row["system"]}] if row.get("system") else []
    return system + [{"role": "user", "content": prompt}, {"role": "assistant", "content": row["output"]}]


def conversation(row: dict, fmt: str, messages_key: str) -> list[dict]:
    """A row of `fmt` (any but text) as a list of {role, content[, weight]}, checked later as any conversation."""
    if fmt == "messages":
        return row[messages_key]
    if fmt == "sharegpt":
        return _sharegpt(row["conversations"], row.get("system"))
    if fmt == "alpaca":
        return _alpaca(row)
    if fmt == "prompt_completion":
        return as_messages(row["prompt"], "user", "prompt") + as_messages(row["completion"], "assistant", "completion")
    raise ValueError(f"rows of format {fmt!r} are not conversations")


def plain_text(row: dict) -> str:
    text = row["text"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be non-empty text")
    return text


ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages) -> None:
    """Raise ValueError (the reason) unless `messages` is a conversation the trainer can learn from
    (or, GRPO's prompt, one to answer)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {role, content}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"message {i} must be {{role: one of {', '.join(ROLES)}, content: <text>}}, got {m!r}")
        if m.get("weight", 1) not in (0, 1):
            raise ValueError(f"message {i} has weight {m['weight']!r}: a turn's weight is 1 (trained) or 0 (context only)")
    first = next((m["role"] for m in messages if m["role"] != "system"), None)
    if first == "assistant":
        raise ValueError("the conversation starts with an assistant turn: it needs a user turn before it")


def no_preference_columns(train_data: str, columns: list[str]) -> ConfigError:
    return ConfigError(f"training_config.datasets.train_data={train_data!r} has no chosen/rejected columns (columns: "
                       f"{', '.join(columns)}): preference training (trainer_type=dpo) needs pairs (prompt, chosen, "
                       f"rejected)")


def no_chat_template(tokenizer_name: str | None) -> ConfigError:
    return ConfigError(f"the tokenizer {tokenizer_name!r} has no chat template, which renders every training row: use a "
                       f"chat model's tokenizer (training_config.model_config.tokenizer_name_or_path) or give one in "
                       f"training_config.datasets.chat_template (its Jinja text or a file)")


# --- prompt-only rows (GRPO) -------------------------------------------------------------------------
# `prompt` (TRL's prompt-only format: text or chat messages; verl's rows: messages with
# reward_model.ground_truth and data_source) or GSM8K's own `question`/`answer`. The other columns
# travel with the prompt to the reward functions; verl's ground truth also as `ground_truth`.
PROMPT_FORMATS = ("auto", "prompt", "verl", "question")


def prompt_format(chosen: str, columns: list[str], train_data: str) -> str:
    """The prompt format rows are read in (`datasets.format`: auto recognizes it from the columns)."""
    found = "verl" if {"prompt", "reward_model"} <= set(columns) else "prompt" if "prompt" in columns \
        else "question" if "question" in columns else None
    if chosen in ("auto", found) and found:
        return found
    if chosen not in PROMPT_FORMATS:
        raise ConfigError(f"training_config.datasets.format={chosen!r} is no prompt format: GRPO reads "
                          f"{', '.join(PROMPT_FORMATS)}")
    raise ConfigError(f"training_config.datasets.train_data={train_data!r}: its columns ({', '.join(columns)}) hold no "
                      f"prompts: GRPO reads `prompt` (text or chat messages; TRL's and verl's rows) or `question` "
                      f"(GSM8K's rows); rename the column")


def prompt_and_columns(row: dict, fmt: str) -> tuple[str | list[dict], dict]:
    """(the prompt as text or messages, the row's other columns for the reward functions)."""
    if fmt == "question":
        prompt = row["question"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("question must be non-empty text")
        return [{"role": "user", "content": prompt}], {k: v for k, v in row.items() if k != "question"}
    prompt = row["prompt"]
    if isinstance(prompt, list):
        check_messages(prompt)
    elif not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be non-empty text or a list of {role, content}")
    columns = {k: v for k, v in row.items() if k != "prompt"}
    if fmt == "verl":
        reward_model = row["reward_model"]
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise ValueError("reward_model must be {style, ground_truth}")
        columns["ground_truth"] = reward_model["ground_truth"]
    return prompt, columns
