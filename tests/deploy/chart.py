"""The Helm chart, rendered offline for the tests: the values files it is checked with, the
rendering (``deploy/helm/render.py``, the same code that writes deploy/kubernetes/), and the
few names of the API drain contract (issue #30) the chart uses before they land."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RENDER_SCRIPT = ROOT / "deploy" / "helm" / "render.py"


def _load_render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hermes_queue_chart_render", RENDER_SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


render_module = _load_render()
Rendered = render_module.Rendered
CHART: Path = render_module.CHART

# The kinds no Kubernetes release defines (CRDs): validated against the checked-in schemas in
# crd_schemas/, named <kind>.<apiVersion with / as ->.json.
CRD_SCHEMAS = ROOT / "tests" / "deploy" / "crd_schemas"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest that
# kubernetes-validate ships schemas for: every object is validated against both.
KUBE_VERSIONS = ("1.25", "1.37")

# The drain contract with the API drain work of issue #30 (item 1), landing in parallel: the
# readiness endpoint and the setting the chart already uses. Once the app serves / reads them,
# the tests check them like every other endpoint and setting; until then they are accepted by
# name only (and load_settings, which refuses unknown variables, is given the rest).
CONTRACT_ENDPOINTS = frozenset({"/health/ready"})
CONTRACT_SETTINGS = frozenset({"stream_drain_seconds"})

# Each values file the chart is checked with: its defaults, then ci/*-values.yaml.
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    **{p.name.removesuffix("-values.yaml"): yaml.safe_load(p.read_text()) for p in VALUES_FILES},
}
RELEASE = "hermes-queue"
NAMESPACE = "agents"


@cache
def _render_case(case: str) -> tuple[Any, ...]:
    return tuple(render_module.render(CASES[case], release=RELEASE, namespace=NAMESPACE))


def render_case(case: str) -> list[Any]:
    """The objects of one values file (a fresh list of cached, shared objects: do not mutate)."""
    return list(_render_case(case))


def render(values: dict[str, Any], **options: Any) -> list[Any]:
    return list(render_module.render(values, **options))


def merged_values(case: str) -> dict[str, Any]:
    """The values an install of ``case`` would use: the chart's defaults under the file's."""
    import helm_python as helm

    with helm.Chart.load(CHART) as chart:
        merged: dict[str, Any] = chart.merge_values(CASES[case])
    return merged


def objects(rendered: list[Any], kind: str) -> list[dict[str, Any]]:
    return [r.obj for r in rendered if r.kind == kind]


def one(rendered: list[Any], kind: str, suffix: str = "") -> dict[str, Any]:
    (found,) = [o for o in objects(rendered, kind) if o["metadata"]["name"].endswith(suffix)]
    return found


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod_spec(obj)["containers"])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
