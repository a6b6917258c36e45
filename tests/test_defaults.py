"""Every default has one definition. The recipe keys' defaults are the schema dataclasses, which
Hydra composes under every recipe: the shared recipe may only state what differs. The launcher's
own settings are its dataclasses too: launcher.yaml holds only the defaults list. A fallback in code
(a value the trainer takes when the launcher did not render one) is the same default."""

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


def test_the_launcher_settings_come_from_their_dataclasses_alone():
    from elastic_launcher.config.compose import compose, to_plain
    from elastic_launcher.config.settings import LauncherSettings

    assert list(yaml.safe_load((ROOT / "launcher.yaml").read_text())) == ["defaults"]
    composed = to_plain(compose(["recipes=llama/tiny_llama_sft"])[0])
    composed.pop("recipes")
    assert not differences(flat(composed), flat(dataclasses.asdict(LauncherSettings())))


def test_the_trainers_fallbacks_are_the_launchers_defaults(monkeypatch):
    """Without the env var the launcher renders, a worker waits for its own stop signal as long as
    the default policy's graceful timeout, the value the launcher renders for it."""
    from elastic_launcher.config.policy import ElasticPolicy
    from training.contract.config_files import STOP_WAIT_ENV
    from training.runtime.elastic import stop_wait_s

    monkeypatch.delenv(STOP_WAIT_ENV, raising=False)
    assert stop_wait_s() == ElasticPolicy().graceful_shutdown_timeout
    monkeypatch.setenv(STOP_WAIT_ENV, "42")
    assert stop_wait_s() == 42


def test_the_shared_recipe_states_only_what_differs_from_the_schema():
    from elastic_launcher.config.compose import schema_defaults

    written = flat(yaml.safe_load((ROOT / "recipes" / "common" / "sft.yaml").read_text()))
    written.pop("defaults")
    schema = flat(schema_defaults())
    assert set(written) <= set(schema), set(written) - set(schema)
    restated = [key for key, value in written.items() if schema[key] == value]
    assert not restated, f"defaults stated twice (schema and sft.yaml): {restated}"


def test_a_recipe_key_left_unset_takes_the_schema_default():
    from elastic_launcher.config.compose import compose, to_plain
    from training.contract.config import TrainingArgs

    plain = to_plain(compose(["recipes=llama/tiny_llama_sft"])[0])["recipes"]
    assert plain["training_config"]["training_args"]["adam_beta2"] == TrainingArgs().adam_beta2
    assert plain["elastic_policy"]["faulty_timeout"] == 0  # the recipe's own value wins over the schema


def test_the_8_gpu_scale_configs_are_written_from_their_one_description():
    """scale_configs/gpu8_*.yaml are generated (scripts/scale_configs.py); a hand edit, or a changed
    description not rerun, fails here. That they hold the vendor's facts: tests/test_catalogue.py."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from scale_configs import files

    generated = files()
    assert sorted(generated) == sorted(p.name for p in (ROOT / "scale_configs").glob("gpu8_*.yaml"))
    for name, text in generated.items():
        assert (ROOT / "scale_configs" / name).read_text() == text, f"rerun python scripts/scale_configs.py ({name})"
