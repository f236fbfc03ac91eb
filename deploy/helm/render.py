"""Render the Helm chart offline, and write deploy/kubernetes/ from it: one source of truth.

    python deploy/helm/render.py            # rewrite the generated files under deploy/kubernetes/
    python deploy/helm/render.py --check    # exit 1 naming every file that differs from a render
    python deploy/helm/render.py -f my-values.yaml --out DIR   # your values, your own copy

The plain manifests are the chart rendered with its default values (fixed replica counts)
for a release named ``hermes-queue`` in the namespace ``hermes-queue``, minus what only Helm
reads (its labels and hook annotations); the optional objects (autoscalers, ServiceMonitors)
are rendered with those features on and land in kustomize components. The kustomization files
beside them are hand-written and not touched here. Needs ``helm-python-sdk`` (Helm v4 as a
library: no ``helm`` binary) and PyYAML, both in the project's ``test`` extra.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "hermes-queue"
OUT = ROOT / "deploy" / "kubernetes"
RELEASE = "hermes-queue"
NAMESPACE = "hermes-queue"

# What Helm alone reads or stamps: left out of manifests applied with kubectl.
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
HELM_ONLY_ANNOTATIONS = ("helm.sh/hook", "helm.sh/hook-weight", "helm.sh/hook-delete-policy")

HEADER = """\
# GENERATED from deploy/helm/hermes-queue ({values}) by `python deploy/helm/render.py`:
# do not edit; change the chart and run it again (tests/deploy/test_generated.py compares).
"""

# Every optional object on, for the components' files.
OPTIONAL_ON: dict[str, Any] = {
    "api": {"autoscaling": {"enabled": True}},
    "worker": {"autoscaling": {"enabled": True, "kind": "keda"}},
    "serviceMonitor": {"enabled": True},
}
WORKER_HPA: dict[str, Any] = {"worker": {"autoscaling": {"enabled": True, "kind": "hpa"}}}


@dataclass(frozen=True)
class Rendered:
    """One object of a render, with the chart template it came from."""

    template: str
    obj: dict[str, Any]
    # The document as the template wrote it, comments included.
    text: str

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    upgrade: bool = False,
) -> list[Rendered]:
    """The chart's objects for ``values`` (validated against values.schema.json first, as an
    install does), in template order; NOTES.txt and empty templates left out."""
    given = dict(values or {})
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(given)
        files = chart.render(
            given,
            name=release,
            namespace=namespace,
            is_install=not upgrade,
            is_upgrade=upgrade,
        )
    out: list[Rendered] = []
    for template in sorted(files):
        if not template.endswith(".yaml"):
            continue
        for text in re.split(r"^---\s*$", files[template], flags=re.MULTILINE):
            doc = yaml.safe_load(text)
            if doc:
                out.append(Rendered(template.rsplit("/", 1)[-1], doc, text.strip("\n") + "\n"))
    return out


def _plain(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without Helm's own labels and annotations (pod templates' too): what
    :func:`_plain_text` must parse to."""
    metas = [obj["metadata"]]
    template = obj.get("spec", {}).get("template")
    if template:
        metas.append(template["metadata"])
    for meta in metas:
        for key, names in (("labels", HELM_ONLY_LABELS), ("annotations", HELM_ONLY_ANNOTATIONS)):
            found = meta.get(key)
            if found:
                for name in names:
                    found.pop(name, None)
                if not found:
                    del meta[key]
    return obj


_HELM_ONLY_KEYS = "|".join(re.escape(k) for k in HELM_ONLY_LABELS + HELM_ONLY_ANNOTATIONS)
_HELM_ONLY_LINE = re.compile(rf"^\s*({_HELM_ONLY_KEYS}):")


def _plain_text(item: Rendered) -> str:
    """The rendered text, comments kept, without the lines of Helm's own labels and
    annotations (and a ``labels:`` / ``annotations:`` key left empty by that); checked to
    parse to :func:`_plain` of the object, so a line-based edit can never change anything else."""
    lines = [line for line in item.text.splitlines() if not _HELM_ONLY_LINE.match(line)]
    kept: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() in {"labels:", "annotations:"}:
            indent = len(line) - len(line.lstrip())
            following = [n for n in lines[i + 1 :] if n.strip() and not n.lstrip().startswith("#")]
            if not following or len(following[0]) - len(following[0].lstrip()) <= indent:
                continue
        kept.append(line)
    text = "\n".join(kept) + "\n"
    expected = _plain(copy.deepcopy(item.obj))
    if yaml.safe_load(text) != expected:
        raise RuntimeError(f"{item.template} {item.kind} {item.name}: the text edit changed it")
    return text


def _document(items: list[Rendered], values: str, note: str) -> str:
    if not items:
        raise RuntimeError(f"nothing rendered for {values}")
    return HEADER.format(values=values) + note + "---\n".join(map(_plain_text, items))


def _pick(rendered: list[Rendered], *, kind: str = "", template: str = "") -> list[Rendered]:
    return [
        r
        for r in rendered
        if (not kind or r.kind == kind) and (not template or r.template == template)
    ]


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top, nested mappings merged (as Helm merges values files)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def generated_files(values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Path under deploy/kubernetes/ -> content, for every generated file (with ``values``
    over the chart's defaults; the committed copy has none)."""
    given = dict(values or {})
    base = render(given)
    optional = render(_merged(given, OPTIONAL_ON))
    worker_hpa = render(_merged(given, WORKER_HPA))
    defaults = "default values" if not given else "values given to render.py"
    return {
        "configmap.yaml": _document(_pick(base, template="configmap.yaml"), defaults, ""),
        "api.yaml": _document(_pick(base, template="api.yaml"), defaults, ""),
        "worker.yaml": _document(_pick(base, template="worker.yaml"), defaults, ""),
        "migrate/migrate-job.yaml": _document(
            _pick(base, template="migrate-job.yaml"),
            defaults,
            "# Run before the Deployments, once per release: see migrate/kustomization.yaml.\n",
        ),
        "autoscaling/api-hpa.yaml": _document(
            _pick(optional, kind="HorizontalPodAutoscaler"), "api.autoscaling.enabled", ""
        ),
        "autoscaling/keda-scaledobject.yaml": _document(
            _pick(optional, kind="ScaledObject"), "worker.autoscaling.kind=keda", ""
        ),
        "autoscaling/worker-hpa.yaml": _document(
            _pick(worker_hpa, template="worker-autoscaler.yaml"),
            "worker.autoscaling.kind=hpa",
            "# The alternative to keda-scaledobject.yaml (use one, not both): see\n"
            "# autoscaling/kustomization.yaml.\n",
        ),
        "monitoring/servicemonitor.yaml": _document(
            _pick(optional, kind="ServiceMonitor"), "serviceMonitor.enabled", ""
        ),
    }


def differences(out: Path = OUT) -> list[str]:
    """The generated files whose copy under ``out`` is missing or differs from a fresh render."""
    return [
        name
        for name, text in generated_files().items()
        if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--out", type=Path, default=OUT, help="default: deploy/kubernetes")
    parser.add_argument(
        "-f", "--values", type=Path, help="a values file over the defaults (not with --check)"
    )
    args = parser.parse_args(argv)
    if args.check and args.values:
        parser.error("--check compares the committed copy, rendered with the defaults")
    values = yaml.safe_load(args.values.read_text(encoding="utf-8")) if args.values else None
    if args.check:
        stale = differences(args.out)
        for name in stale:
            print(f"{args.out / name}: differs from the chart's render", file=sys.stderr)
        return 1 if stale else 0
    for name, text in generated_files(values).items():
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
