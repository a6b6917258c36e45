"""Agent environments as TRL users write them, checked before anything runs (training.contract.environments),
and tool calls read from a model's own output in its family's format (training.rl.tool_calls)."""

import pytest

from training.contract.environments import check_environment, load_environment, tools
from training.contract.errors import ConfigError
from training.rl.tool_calls import ToolCall, format_of, parse

CALCULATOR = '''
class Calculator:
    """Sums a list of numbers, one tool call at a time."""

    def reset(self, numbers: list, **row) -> str:
        self.numbers, self.total = numbers, 0
        return f"Add up {numbers}."

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    def _private(self):
        return None
'''


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "calc.py"
    path.write_text(CALCULATOR)
    return path


def test_an_environments_public_methods_are_its_tools_with_json_schemas(env_file):
    cls = load_environment(f"{env_file}:Calculator")
    (add,) = tools(cls)
    assert add.name == "add"
    assert add.schema == {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "the first"},
                                                        "b": {"type": "integer", "description": "the second"}},
                       "required": ["a", "b"]},
        "return": {"type": "integer"}}}


@pytest.mark.parametrize("source, spec, says", [
    (CALCULATOR, "{path}:Calculater", "has no function 'Calculater': did you mean 'Calculator'?"),
    (CALCULATOR, "{dir}/nothing.py:Calculator", "the file {dir}/nothing.py of"),
    ("def Calculator(): pass\n", "{path}:Calculator", "names function 'Calculator', not a class"),
    ("class Calculator:\n    def add(self, a: int) -> int:\n        '''Add.\n\n        Args:\n            a: a\n        '''\n",
     "{path}:Calculator", "has no reset(**row) method"),
    ("class Calculator:\n    def reset(self, **row): pass\n    def add(self, a, b):\n        '''Add.'''\n",
     "{path}:Calculator", "the tool Calculator.add cannot be offered to the model"),
    ("class Calculator:\n    def reset(self, **row): pass\n", "{path}:Calculator", "has no public method besides reset"),
])
def test_an_environment_that_cannot_run_is_one_line(tmp_path, source, spec, says):
    path = tmp_path / "env.py"
    path.write_text(source)
    with pytest.raises(ConfigError, match="environment") as e:
        check_environment(spec.format(path=path, dir=tmp_path), [])
    assert says.format(dir=tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_a_reward_that_reads_environments_needs_one(tmp_path, env_file):
    rewards = tmp_path / "rewards.py"
    rewards.write_text("def solved(completions, environments, **kw):\n    return [1.0 for _ in completions]\n")
    with pytest.raises(ConfigError, match=r"reward function .*rewards.py:solved takes `environments`, and no "
                                          r"training_config.training_args.method_args.environment is set"):
        check_environment(None, ["math_verify", f"{rewards}:solved"])
    assert [t.name for t in check_environment(f"{env_file}:Calculator", [f"{rewards}:solved"])] == ["add"]


@pytest.mark.parametrize("template, fmt", [
    ("{% for t in tools %}{{ t }}{% endfor %}<tool_call>\\n{{ call }}</tool_call>", "hermes"),
    ("<tool_call>\\n<function={{ name }}>", "xml_function"),
    ("{{- '<|python_tag|>' }}{% if message.role == 'ipython' %}", "llama3_json"),
    ("{{ 'to=functions.' + name }}<|call|>", "harmony"),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", None),
])
def test_the_tool_call_format_is_the_one_the_chat_template_teaches(template, fmt):
    assert format_of(template) == fmt


def test_tool_calls_are_read_in_each_familys_format_and_a_bad_one_keeps_its_error():
    assert parse('Let me add.<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', "hermes") == \
        [ToolCall("add", {"a": 1, "b": 2})]
    assert parse("<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nten\n</parameter>\n"
                 "</function>\n</tool_call>", "xml_function") == [ToolCall("add", {"a": 1, "b": "ten"})]
    assert parse('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', "llama3_json") == \
        [ToolCall("add", {"a": 1, "b": 2})]
    assert parse("<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}<|call|>",
                 "harmony") == [ToolCall("add", {"a": 1, "b": 2})]
    assert parse("The sum is 3.", "hermes") == [] and parse("The sum is 3.", "llama3_json") == []
    (bad,) = parse('<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>', "hermes")
    assert bad.name == "" and bad.error.startswith("not JSON (Expecting property name")
    (bad,) = parse("to=functions.add<|message|>{\"a\": <|call|>", "harmony")
    assert bad.name == "add" and bad.error.startswith("arguments are not JSON")
    (two, three) = parse('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", '
                         '"arguments": "{\\"x\\": 2}"}</tool_call>', "hermes")
    assert (two, three) == (ToolCall("a", {}), ToolCall("b", {"x": 2}))
