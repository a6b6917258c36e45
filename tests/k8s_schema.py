"""Independent checks of rendered manifests: JSON schemas of the job CRDs (tests/schemas/), the pod
template against the Kubernetes API models of the official `kubernetes` client, and the HyperPod
SDK's own pydantic mirror of the HyperPodPyTorchJob CRD. The TrainJob's is the openAPIV3Schema of
Kubeflow Trainer v2.3.0's CRD, copied unchanged; it is checked strictly (a field the CRD does not
declare is an error here, where the API server would silently drop it) with its name rule."""

import importlib.util
import json
import re
from pathlib import Path

import jsonschema
import yaml

SCHEMAS = Path(__file__).parent / "schemas"


def _strict(node):
    """The schema with every declared object closed to undeclared fields."""
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
    elif isinstance(node, list):
        node = [_strict(v) for v in node]
    return node


def crd_schema(schema_name: str) -> dict:
    if schema_name.endswith(".json"):
        schema = json.loads((SCHEMAS / schema_name).read_text())
        schema.pop("$comment", None)
        return _strict(schema)
    return yaml.safe_load((SCHEMAS / schema_name).read_text())


RFC1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # the TrainJob CRD's rule on metadata.name


def crd_errors(obj: dict, schema_name: str) -> list[tuple[str, str]]:
    """(field path, message) of every violation of the CRD's schema (and the TrainJob's name rule)."""
    errors = [(".".join(map(str, e.path)) or "<root>", e.message)
              for e in jsonschema.Draft202012Validator(crd_schema(schema_name)).iter_errors(obj)]
    name = (obj.get("metadata") or {}).get("name", "")
    if schema_name.startswith("trainjob") and not (RFC1035_LABEL.match(name) and len(name) <= 63):
        errors.append(("metadata.name", "metadata.name must match RFC 1035 DNS label format (at most 63 characters)"))
    return sorted(errors)


def validate_crd(obj: dict, schema_name: str) -> None:
    errors = crd_errors(obj, schema_name)
    assert not errors, errors


def check_k8s(data, type_name: str, path: str = "$") -> None:
    """Every key must be a field of the Kubernetes model, every value of its type, every required
    field present."""
    from kubernetes import client

    list_of = re.fullmatch(r"(?:list|List)\[(.+)\]", type_name)
    dict_of = re.fullmatch(r"(?:dict\(|Dict\[)str, (.+)[\)\]]", type_name)
    if list_of:
        assert isinstance(data, list), f"{path}: expected a list"
        for i, item in enumerate(data):
            check_k8s(item, list_of.group(1), f"{path}[{i}]")
    elif dict_of:
        assert isinstance(data, dict), f"{path}: expected a mapping"
        value_type = dict_of.group(1)
        for key, value in data.items():
            check_k8s(value, value_type, f"{path}.{key}")
    elif type_name in ("str", "int", "bool", "float"):
        expected = {"str": str, "int": int, "bool": bool, "float": (int, float)}[type_name]
        assert isinstance(data, expected), f"{path}: {data!r} is not {type_name}"
    elif type_name != "object":
        model = getattr(client, type_name)
        assert isinstance(data, dict), f"{path}: expected a {type_name} mapping"
        by_json = {v: k for k, v in model.attribute_map.items()}
        unknown = set(data) - set(by_json)
        assert not unknown, f"{path}: {sorted(unknown)} are not fields of {type_name}"
        for key, value in data.items():
            check_k8s(value, model.openapi_types[by_json[key]], f"{path}.{key}")
        model(**{by_json[k]: v for k, v in data.items()})  # raises on a missing required field


def hyperpod_sdk_model():
    """The SDK's pydantic model of the HyperPodPyTorchJob spec (a fixture copied from its wheel)."""
    spec = importlib.util.spec_from_file_location("hyperpod_unified_config",
                                                  SCHEMAS / "hyperpod_pytorch_job_unified_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._HyperPodPytorchJob
