"""Regenerate the shipped tiny datasets and tokenizer (all generated here, license-clean).

    python data/make_tiny_data.py

sft_tiny.jsonl: chat samples ({"id", "messages": [{role, content}, ...]}) about arithmetic, colours,
counting and word facts, some multi-turn, some with a system prompt. dpo_tiny.jsonl: preference
pairs on the same questions, a right answer chosen over a wrong one, laid out as UltraFeedback's
binarized sets are: `prompt` as text, `chosen`/`rejected` as whole conversations. grpo_tiny.jsonl: prompts
for GRPO in TRL's prompt-only layout (`prompt` as chat messages) with the reference `answer` (sums of
one-digit numbers), scored by math_verify and data/grpo_tiny_rewards.py; grpo_tiny_sft.jsonl: the same sums
answered, mostly hedged, the GRPO twin's warm start (data/tiny_grpo_model). tiny_tokenizer/: a 512-token
BPE tokenizer trained on them, with a chat template, loadable with AutoTokenizer.from_pretrained.
tiny_tokenizers/<family>/: the same vocabulary with a model family's special tokens and chat
template (tiny_tokenizers/<family>/chat_template.jinja, the one copy of it: the published template's
conversation logic, without its tool calling but for qwen2_5's (the agent twin's), read back when the
tokenizer is regenerated), so the tiny twins mask prompts the way the real models' templates render them.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLOURS = {"sky": "blue", "grass": "green", "snow": "white", "coal": "black", "blood": "red", "sun": "yellow",
           "lemon": "yellow", "leaf": "green", "ocean": "blue", "cherry": "red", "milk": "white", "night": "black"}
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
WORDS = ["apple", "river", "stone", "cloud", "bridge", "garden", "window", "candle", "forest", "rocket"]
SYSTEMS = ["You are a helpful assistant.", "Answer briefly.", "You are a patient teacher."]


def sample(rng: random.Random, i: int) -> dict:
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randrange(50), rng.randrange(50)
        turns = [(f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}.")]
    elif kind == 1:
        thing = rng.choice(sorted(COLOURS))
        turns = [(f"What colour is the {thing}?", f"The {thing} is usually {COLOURS[thing]}.")]
    elif kind == 2:
        n = rng.randrange(1, 10)
        turns = [(f"Count from one to {NUMBERS[n]}.", " ".join(NUMBERS[1:n + 1]) + ".")]
    else:
        word = rng.choice(WORDS)
        turns = [(f"How many letters are in the word {word}?", f"The word {word} has {len(word)} letters."),
                 ("And spelled backwards?", f"Backwards it is {word[::-1]}.")][: rng.randrange(1, 3)]
    messages = [{"role": "system", "content": rng.choice(SYSTEMS)}] if rng.random() < 0.3 else []
    for user, assistant in turns:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return {"id": i, "messages": messages}


def preference_pair(rng: random.Random, i: int) -> dict:
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(50), rng.randrange(50)
        prompt, right, wrong = f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}.", f"{a} plus {b} is {a + b + rng.randrange(1, 9)}."
    elif kind == 1:
        thing = rng.choice(sorted(COLOURS))
        other = rng.choice(sorted(set(COLOURS.values()) - {COLOURS[thing]}))
        prompt, right, wrong = (f"What colour is the {thing}?", f"The {thing} is usually {COLOURS[thing]}.",
                                f"The {thing} is usually {other}.")
    else:
        word = rng.choice(WORDS)
        prompt, right, wrong = (f"How many letters are in the word {word}?", f"The word {word} has {len(word)} letters.",
                                f"The word {word} has {len(word) + rng.randrange(1, 4)} letters.")
    user = {"role": "user", "content": prompt}
    return {"id": i, "prompt": prompt, "chosen": [user, {"role": "assistant", "content": right}],
            "rejected": [user, {"role": "assistant", "content": wrong}]}


def write_preferences() -> None:
    rng = random.Random(1)
    with open(HERE / "dpo_tiny.jsonl", "w") as f:
        for i in range(256):
            f.write(json.dumps(preference_pair(rng, i)) + "\n")


def write_prompts() -> None:
    rng = random.Random(2)
    with open(HERE / "grpo_tiny.jsonl", "w") as f:
        for i in range(256):
            a, b = rng.randrange(10), rng.randrange(10)
            f.write(json.dumps({"id": i, "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
                                "answer": str(a + b)}) + "\n")
    # The GRPO twin's warm start (data/tiny_grpo_model): the same sums answered, a tenth exactly ("13") and
    # the rest hedged ("~13"), an answer math_verify cannot accept.
    rng = random.Random(5)
    with open(HERE / "grpo_tiny_sft.jsonl", "w") as f:
        for i in range(2048):
            a, b = rng.randrange(10), rng.randrange(10)
            answer = str(a + b) if rng.random() < 0.1 else f"~{a + b}"
            f.write(json.dumps({"id": i, "messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                                                      {"role": "assistant", "content": answer}]}) + "\n")


CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# family -> (bos, eos, special tokens, other added tokens) as the family's tokenizer_config.json has them
FAMILIES = {
    "chatml_qwen2": ("<|endoftext|>", "<|im_end|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], []),
    "qwen3": ("<|endoftext|>", "<|im_end|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], ["<think>", "</think>"]),
    # Qwen 2.5's template with its tool calling (the agent twin's): <tool_call> JSON, replies as <tool_response>
    "qwen2_5": ("<|endoftext|>", "<|im_end|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]),
    "deepseek_r1_distill": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                            ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
                            ["<think>", "</think>"]),
    "llama4": ("<|begin_of_text|>", "<|eot|>", ["<|begin_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>"], []),
}


def write_agent_data() -> None:
    """agent_tiny.jsonl: the agent twin's prompts (a word whose secret number to find, data/agent_tiny_env.py);
    agent_tiny_sft.jsonl: transcripts of the tool's use, with the tools as the trainer offers them (its
    warm start: data/tiny_agent_model)."""
    import sys

    sys.path.insert(0, str(HERE.parent))
    from training.contract.environments import load_environment, tools

    from agent_tiny_env import SECRETS

    schemas = [t.schema for t in tools(load_environment(str(HERE / "agent_tiny_env.py") + ":SecretNumbers"))]
    rng = random.Random(3)
    questions = ["What is the secret number of {}?", "Find the secret number of the word {}.",
                 "Which number does {} hide?"]
    words = sorted(SECRETS)
    with open(HERE / "agent_tiny.jsonl", "w") as f:
        for i in range(256):
            word = rng.choice(words)
            f.write(json.dumps({"id": i, "prompt": [{"role": "user", "content": rng.choice(questions).format(word)}],
                                "word": word}) + "\n")
    with open(HERE / "agent_tiny_sft.jsonl", "w") as f:
        for i in range(256):
            word = rng.choice(words)
            call = {"type": "function", "function": {"name": "lookup", "arguments": {"word": word}}}
            messages = [{"role": "user", "content": rng.choice(questions).format(word)},
                        {"role": "assistant", "content": "", "tool_calls": [call]},
                        {"role": "tool", "name": "lookup", "content": str(SECRETS[word])},
                        {"role": "assistant", "content": f"The secret number of {word} is {SECRETS[word]}."}]
            f.write(json.dumps({"id": i, "messages": messages, "tools": schemas}) + "\n")


def family_tokenizers() -> None:
    from transformers import AutoTokenizer

    for family, (bos, eos, specials, added) in FAMILIES.items():
        template = (HERE / "tiny_tokenizers" / family / "chat_template.jinja").read_text()
        tok = AutoTokenizer.from_pretrained(HERE / "tiny_tokenizer")
        tok.add_special_tokens({"bos_token": bos, "eos_token": eos, "additional_special_tokens": specials})
        tok.add_tokens(added)
        tok.chat_template = template
        tok.save_pretrained(HERE / "tiny_tokenizers" / family)


def main() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    samples = [sample(rng, i) for i in range(512)]
    with open(HERE / "sft_tiny.jsonl", "w") as f:
        for s in samples:
            f.write(json.dumps(s) + "\n")

    specials = ["<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((m["content"] for s in samples for m in s["messages"]), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|pad|>", unk_token="<|unk|>",
                                   additional_special_tokens=specials[4:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(HERE / "tiny_tokenizer")
    write_preferences()
    write_prompts()
    family_tokenizers()
    write_agent_data()


if __name__ == "__main__":
    main()
