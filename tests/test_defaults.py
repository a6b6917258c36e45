"""Every default has one definition. The recipe keys' defaults are the schema dataclasses, which
Hydra composes under every recipe: the shared recipe may only state what differs. launcher.yaml is
what a user reads and overrides for the launcher's own settings: it must state their defaults."""

import dataclasses

import yaml

from conftest import ROOT


def flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(written: dict, defaults: dict) -> list:
    return [(key, written.get(key, "<missing>"), defaults.get(key, "<missing>"))
            for key in sorted(set(written) | set(defaults)) if written.get(key, "<missing>") != defaults.get(key, "<missing>")]


def test_launcher_yaml_states_the_settings_defaults():
    from elastic_launcher.settings import LauncherSettings

    written = yaml.safe_load((ROOT / "launcher.yaml").read_text())
    written.pop("defaults")
    assert not differences(flat(written), flat(dataclasses.asdict(LauncherSettings())))


def test_the_shared_recipe_states_only_what_differs_from_the_schema():
    from elastic_launcher.compose import schema_defaults

    written = flat(yaml.safe_load((ROOT / "recipes" / "common" / "sft.yaml").read_text()))
    written.pop("defaults")
    schema = flat(schema_defaults())
    assert set(written) <= set(schema), set(written) - set(schema)
    restated = [key for key, value in written.items() if schema[key] == value]
    assert not restated, f"defaults stated twice (schema and sft.yaml): {restated}"


def test_a_recipe_key_left_unset_takes_the_schema_default():
    from elastic_launcher.compose import compose, to_plain
    from training.config import TrainingArgs

    plain = to_plain(compose(["recipes=llama/tiny_llama_sft"])[0])["recipes"]
    assert plain["training_config"]["training_args"]["adam_beta2"] == TrainingArgs().adam_beta2
    assert plain["elastic_policy"]["faulty_timeout"] == 0  # the recipe's own value wins over the schema
