"""The recipe table of docs/recipes.md, built from the recipes on disk (tests/test_catalogue.py checks
that the page holds exactly this table):

    python scripts/catalogue.py    # rewrites the table in docs/recipes.md
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elastic_launcher.config.compose import compose, to_plain  # noqa: E402
from elastic_launcher.config.user_recipes import catalogue  # noqa: E402
from elastic_launcher.planning.memory import ModelShape  # noqa: E402
from elastic_launcher.planning.plan import make_plan  # noqa: E402

HEADER = "| recipe | model | method | parameters | nodes | instance types |"


def method(tc) -> str:
    judged = "judge" in ((tc.training_args.method_args or {}).get("rewards") or ())  # RLAIF
    agent = bool((tc.training_args.method_args or {}).get("environment"))
    return f"{tc.training_args.trainer_type.upper()}{', LLM judge' if judged else ''}{', agent' if agent else ''} " \
           f"({'LoRA' if tc.model_config.lora else 'full'})"


def elastic_plan(recipe: str):
    return make_plan(to_plain(compose([f"recipes={recipe}", "recipes.elastic_policy.is_elastic=true"])[0])["recipes"])


def row(recipe: str, plan_of=elastic_plan) -> str:
    plan = plan_of(recipe)
    tc = plan.base.training_config
    shape = plan.hardware.model_shape
    params = ModelShape.from_config(shape).params if shape else 0
    params = f"{params / 1e9:.1f}B" if params >= 5e7 else "tiny (CPU)"
    model = tc.model_config.model_name_or_path or f"inline {tc.model_config.architecture['model_type']}"
    nodes = ", ".join(str(s.nodes) for s in plan.sizes)
    types = ", ".join(t.removeprefix("ml.") for t in plan.hardware.instance_types or [plan.instance.name])
    return f"| `{recipe}` | {model} | {method(tc)} | {params} | {nodes} | {types} |"


def table(plan_of=elastic_plan) -> str:
    """`plan_of`: recipe -> its elastic plan (a test passes its cached one)."""
    return "\n".join([HEADER, "|---|---|---|---|---|---|", *(row(r, plan_of) for r in catalogue("recipes"))])


def write(page: Path) -> None:
    text = page.read_text()
    start = text.index(HEADER)
    end = text.index("\n\n", start)
    page.write_text(text[:start] + table() + text[end:])


if __name__ == "__main__":
    write(Path(__file__).resolve().parent.parent / "docs" / "recipes.md")
    print("rewrote the recipe table in docs/recipes.md")
