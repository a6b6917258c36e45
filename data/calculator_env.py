"""A calculator as an agent's environment (docs/agents.md; the catalogue's *_agent_lora recipes, on
GSM8K): one tool that evaluates arithmetic, written as TRL's environment_factory takes it."""

import ast
import operator

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class Calculator:
    def reset(self, **row) -> None:
        self.results = []

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression of numbers, + - * / and parentheses.

        Args:
            expression: The expression, e.g. "(3 + 4) * 12".
        """
        def value(node):
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
                return node.value
            if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
                return OPERATORS[type(node.op)](value(node.left), value(node.right))
            raise ValueError(f"cannot evaluate {ast.unparse(node)!r}")

        result = value(ast.parse(expression, mode="eval").body)
        self.results.append(result)
        return f"{result:g}"


def used_the_calculator(completions, environments, **kwargs) -> list[float]:
    """1 for a trajectory whose final answer holds a number the calculator returned."""
    return [float(any(f"{r:g}" in completion[-1]["content"] for r in env.results))
            for completion, env in zip(completions, environments)]
