"""Static checks of deploy/: what can be verified without Docker, a cluster or Prometheus.

Every manifest parses; every ``hermes-queue`` command a manifest or the Dockerfile runs exists
in the CLI (with valid options); every metric they query is exported by the API or worker
registries; every ``HERMES_QUEUE_*`` variable is a real setting and the values load; nginx keeps
SSE unbuffered; the image runs as non-root; worker grace periods exceed ``drain_seconds``; the
Kubernetes objects reference each other consistently. deploy/kubernetes/ is generated from the
Helm chart (tests/deploy/test_generated.py); the chart itself is checked in test_chart.py.
Nothing here needs Redis.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from hermes_queue import tracing
from hermes_queue.cli import main
from hermes_queue.config import CONFIG_FILE_VAR, ENV_PREFIX, Settings, load_settings
from hermes_queue.metrics.labels import OUTCOMES, QUEUE_STATES
from hermes_queue.metrics.processes import ApiMetrics, WorkerMetrics
from hermes_queue.queueview.figures import Depth, QueueSnapshot, Throughput, WorkerInfo
from hermes_queue.webhooks.outbox import OutboxStats
from tests.deploy.chart import CONTRACT_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
DOCS = ROOT / "docs" / "deploy.md"
CHART_TEMPLATES = DEPLOY / "helm" / "hermes-queue" / "templates"
# Go templates are not YAML until rendered (test_chart.py renders them).
YAML_FILES = sorted(
    p
    for p in DEPLOY.rglob("*")
    if p.suffix in {".yml", ".yaml"} and not p.is_relative_to(CHART_TEMPLATES)
)
JSON_FILES = sorted(DEPLOY.rglob("*.json"))
DASHBOARDS = sorted((DEPLOY / "grafana").rglob("*.json"))
TEXT_FILES = [
    *sorted(
        p
        for p in DEPLOY.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ),
    DOCS,
]
IMAGE = "hermes-queue"
SETTING_NAMES = set(Settings().flat())
# Settings of the drain contract (tests/deploy/chart.py) the manifests use before the app has them.
PENDING_VARS = {ENV_PREFIX + name.upper() for name in CONTRACT_SETTINGS - SETTING_NAMES}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@cache
def load_yaml(path: Path) -> tuple[Any, ...]:
    return tuple(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None)


def compose() -> dict[str, Any]:
    (doc,) = load_yaml(DEPLOY / "docker-compose.yml")
    return doc


def k8s_objects() -> list[dict[str, Any]]:
    """The objects of deploy/kubernetes/ and its components (not the kustomizations)."""
    return [
        doc
        for path in sorted(K8S.rglob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_yaml(path)
    ]


def k8s(kind: str) -> list[dict[str, Any]]:
    return [o for o in k8s_objects() if o["kind"] == kind]


def k8s_one(kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in k8s(kind) if o["metadata"].get("name") == name]
    return obj


def is_our_image(image: str) -> bool:
    """``hermes-queue``, ``hermes-queue:tag``, ``registry/path/hermes-queue:tag``."""
    return image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0] == IMAGE


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


# --- Dockerfile ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    rest: str

    def argv(self) -> list[str]:
        """Exec form (JSON array) as is; shell form as ``sh -c``."""
        if self.rest.startswith("["):
            return list(json.loads(self.rest))
        return ["/bin/sh", "-c", self.rest]


@cache
def dockerfile() -> tuple[Instruction, ...]:
    out: list[Instruction] = []
    buffer = ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # comments may sit inside a continuation too
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        keyword, _, rest = (buffer + line).partition(" ")
        out.append(Instruction(keyword.upper(), rest.strip()))
        buffer = ""
    assert not buffer, "Dockerfile ends inside a line continuation"
    return tuple(out)


def final_stage() -> list[Instruction]:
    instructions = list(dockerfile())
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    return instructions[last_from:]


def last(keyword: str) -> Instruction:
    found = [i for i in final_stage() if i.keyword == keyword]
    assert found, f"the Dockerfile's final stage has no {keyword}"
    return found[-1]


def healthcheck_argv() -> list[str]:
    rest = last("HEALTHCHECK").rest
    assert rest.upper() != "NONE", "HEALTHCHECK NONE"
    _, _, command = rest.partition("CMD ")
    return Instruction("CMD", command.strip()).argv()


def image_default_args() -> list[str]:
    """What ``docker run IMAGE`` runs after the entrypoint: the CMD."""
    return last("CMD").argv()


def test_dockerfile_runs_as_non_root() -> None:
    user = last("USER").rest.split(":", 1)[0]
    assert user not in {"root", "0"}, f"final USER is {user!r}"
    # A numeric uid lets Kubernetes' runAsNonRoot verify it; the manifests use the same one.
    assert user.isdigit(), "use a numeric USER so runAsNonRoot can check it"
    for deployment in k8s("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == int(user), deployment["metadata"]["name"]


def test_dockerfile_image_is_slim_python_311_and_uses_the_cli() -> None:
    base = final_stage()[0].rest.split()[0]
    assert base.startswith("python:3.11-slim"), base
    assert last("ENTRYPOINT").argv() == ["hermes-queue"], "exec-form ENTRYPOINT hermes-queue"
    assert image_default_args() == ["api"], "default command: api"
    assert healthcheck_argv()[0] == "hermes-queue"


def test_dockerfile_copies_existing_paths_only() -> None:
    for ins in dockerfile():
        if ins.keyword != "COPY" or "--from=" in ins.rest:
            continue
        *sources, _dest = ins.rest.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the build context"


# --- parsing --------------------------------------------------------------------------------


def test_deploy_tree_has_the_expected_files() -> None:
    expected = [
        "Dockerfile",
        "docker-compose.yml",
        "nginx/nginx.conf",
        "prometheus/prometheus.yml",
        "prometheus/alerts.yml",
        "grafana/dashboards/hermes-queue.json",
        "kubernetes/kustomization.yaml",
        "kubernetes/secret.example.yaml",
        "helm/render.py",
        "helm/hermes-queue/Chart.yaml",
        "helm/hermes-queue/values.yaml",
        "helm/hermes-queue/values.schema.json",
    ]
    for name in expected:
        assert (DEPLOY / name).is_file(), name
    assert DOCS.is_file()


@pytest.mark.parametrize("path", YAML_FILES, ids=rel)
def test_yaml_manifest_parses(path: Path) -> None:
    docs = load_yaml(path)
    assert docs, f"{rel(path)} is empty"
    assert all(isinstance(d, dict) for d in docs)


@pytest.mark.parametrize("path", JSON_FILES, ids=rel)
def test_json_manifest_parses(path: Path) -> None:
    assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict)


# --- CLI commands ---------------------------------------------------------------------------

_CLI_IN_TEXT = re.compile(r"(?:^|[\s;&|(\"'/])hermes-queue((?:\s+[\w.:/=-]+)+)")


def cli_invocations() -> list[tuple[str, list[str]]]:
    """Every ``hermes-queue`` argv (without the program) that a manifest or the image runs."""
    found: list[tuple[str, list[str]]] = []
    default_args = image_default_args()

    def from_argv(where: str, argv: list[str]) -> None:
        if argv and argv[0] == "hermes-queue":
            found.append((where, argv[1:]))
        elif argv:  # sh -c "...", CMD-SHELL "...": look for hermes-queue inside the string
            for match in _CLI_IN_TEXT.finditer(" ".join(argv)):
                found.append((where, shlex.split(match.group(1))))

    # The image: ENTRYPOINT + CMD, HEALTHCHECK, and any RUN that calls the CLI.
    from_argv("Dockerfile ENTRYPOINT/CMD", last("ENTRYPOINT").argv() + default_args)
    from_argv("Dockerfile HEALTHCHECK", healthcheck_argv())
    for ins in dockerfile():
        if ins.keyword == "RUN":
            from_argv("Dockerfile RUN", ins.argv())

    # Compose: services built from our image run `command` after the entrypoint.
    for name, service in compose()["services"].items():
        where = f"docker-compose.yml service {name}"
        if is_our_image(service.get("image", "")) or "build" in service:
            command = service.get("command", default_args)
            if isinstance(command, str):
                command = shlex.split(command)
            entrypoint = service.get("entrypoint", ["hermes-queue"])
            if isinstance(entrypoint, str):
                entrypoint = shlex.split(entrypoint)
            from_argv(where, list(entrypoint) + list(command))
        test = (service.get("healthcheck") or {}).get("test")
        if isinstance(test, list) and test and test[0] in {"CMD", "CMD-SHELL"}:
            from_argv(f"{where} healthcheck", test[1:])

    # Kubernetes: containers of our image (command defaults to the entrypoint, args to CMD),
    # and every exec probe or hook.
    for obj in k8s_objects():
        for node in walk(obj):
            if not (isinstance(node, dict) and "image" in node and "name" in node):
                continue
            where = f"{obj['kind']} {obj['metadata'].get('name') or obj['metadata']} {node['name']}"
            if is_our_image(node["image"]):
                argv = node.get("command", ["hermes-queue"]) + node.get("args", default_args)
                from_argv(where, argv)
            for key in ("readinessProbe", "livenessProbe", "startupProbe"):
                if "exec" in node.get(key, {}):
                    from_argv(f"{where} {key}", node[key]["exec"]["command"])
            for hook in (node.get("lifecycle") or {}).values():
                if "exec" in hook:
                    from_argv(f"{where} lifecycle", hook["exec"]["command"])

    # Anything else in any parsed YAML (comments are not parsed, so prose there is free).
    for path in YAML_FILES:
        for doc in load_yaml(path):
            for node in walk(doc):
                if isinstance(node, list) and node and all(isinstance(x, str) for x in node):
                    text = " ".join(node)
                elif isinstance(node, str):
                    text = node
                else:
                    continue
                for match in _CLI_IN_TEXT.finditer(text):
                    found.append((rel(path), shlex.split(match.group(1))))
    return found


def cli_problem(args: list[str]) -> str | None:
    """Why ``hermes-queue ARGS`` would not run a command, or None. Parses, never invokes."""
    command: click.Command = main
    path = "hermes-queue"
    rest = list(args)
    while isinstance(command, click.Group):
        words = [a for a in rest if not a.startswith("-")]
        if not words:
            return f"`{path}` names no subcommand"
        name = words[0]
        sub = command.commands.get(name)
        if sub is None:
            return f"`{path} {name}`: no such command (has: {', '.join(sorted(command.commands))})"
        rest = rest[rest.index(name) + 1 :]
        command, path = sub, f"{path} {name}"
    try:
        command.make_context(path, rest)  # parses options and arguments only
    except click.ClickException as exc:
        return f"`{path} {' '.join(rest)}`: {exc.format_message()}"
    return None


def test_every_cli_command_run_by_the_manifests_exists() -> None:
    invocations = cli_invocations()
    subcommands = {args[0] for _, args in invocations if args}
    # The collector must see the processes the deployment is made of.
    assert {"api", "worker", "migrate"} <= subcommands, subcommands
    problems = sorted(
        {f"{where}: {problem}" for where, args in invocations if (problem := cli_problem(args))}
    )
    assert not problems, "\n".join(problems)


def test_cli_problem_detects_unknown_commands_and_options() -> None:
    assert cli_problem(["api", "--host", "0.0.0.0"]) is None
    assert cli_problem(["config", "check"]) is None
    assert cli_problem(["nope"]) is not None
    assert cli_problem(["api", "--no-such-option"]) is not None
    assert cli_problem(["config"]) is not None


# --- metrics --------------------------------------------------------------------------------


def exported_metric_names() -> set[str]:
    """Sample names the API and worker registries can expose, as PromQL sees them."""
    api = ApiMetrics()
    # The queue collector yields its gauges only after a successful Redis read.
    api.queue.snapshot = QueueSnapshot(
        at=0.0,
        depth=Depth(ready=0, deferred=0, running=0, blocked=0, oldest_ready_age_seconds=0.0),
        workers=[WorkerInfo(id="w", slots=1, busy=0, seen_seconds_ago=0.0)],
        throughput=Throughput(window_seconds=300.0),
        desired_workers=0,
    )
    # So does the webhook collector.
    api.webhooks.stats = OutboxStats(pending=0, oldest_pending_age_seconds=0.0, dead_letters=0)
    worker = WorkerMetrics()
    names: set[str] = set()
    for registry in (api.registry, worker.registry):
        for family in registry.collect():
            names.update(sample.name for sample in family.samples)
            # Labelled histograms and counters have no samples until first observed.
            suffixes = {
                "counter": ("_total",),
                "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("", "_sum", "_count"),
            }.get(family.type, ("",))
            names.update(family.name + suffix for suffix in suffixes)
    return names


_METRIC = re.compile(r"(?<![A-Za-z0-9_])hermes_queue_[a-z0-9_]+")


def promql_expressions() -> list[tuple[str, str]]:
    """(where, expression) for every query in alerts, the dashboard, KEDA and the HPA."""
    out: list[tuple[str, str]] = []
    (alerts,) = load_yaml(DEPLOY / "prometheus" / "alerts.yml")
    for group in alerts["groups"]:
        for rule in group["rules"]:
            out.append((f"alerts.yml {rule.get('alert') or rule.get('record')}", rule["expr"]))
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text(encoding="utf-8"))["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{rel(path)} panel {panel['title']!r}", target["expr"]))
    for obj in k8s("ScaledObject"):
        for trigger in obj["spec"]["triggers"]:
            out.append((f"ScaledObject {obj['metadata']['name']}", trigger["metadata"]["query"]))
    for obj in k8s("HorizontalPodAutoscaler"):
        for metric in obj["spec"]["metrics"]:
            if metric["type"] in {"External", "Pods", "Object"}:
                spec = metric[metric["type"].lower()]
                out.append((f"HPA {obj['metadata']['name']}", spec["metric"]["name"]))
    return out


def test_every_referenced_metric_is_exported() -> None:
    exported = exported_metric_names()
    assert "hermes_queue_desired_workers" in exported  # the snapshot trick worked
    problems = []
    for where, expr in promql_expressions():
        problems += [f"{where}: {m}" for m in _METRIC.findall(expr) if m not in exported]
    # Prose too: docs/deploy.md, comments and descriptions in every deploy file.
    for path in TEXT_FILES:
        for name in set(_METRIC.findall(path.read_text(encoding="utf-8"))):
            if name not in exported:
                problems.append(f"{rel(path)}: {name}")
    assert not problems, "not exported:\n" + "\n".join(sorted(set(problems)))


def test_label_values_in_queries_exist() -> None:
    allowed = {"state": set(QUEUE_STATES), "outcome": set(OUTCOMES), "reason": {"depth", "age"}}
    for where, expr in promql_expressions():
        for label, value in re.findall(r'\b(state|outcome|reason)\s*=~?\s*"([^"]*)"', expr):
            assert value in allowed[label], f"{where}: {label}={value!r}"


def test_alerts_cover_the_operational_failures() -> None:
    (alerts,) = load_yaml(DEPLOY / "prometheus" / "alerts.yml")
    rules = [rule for group in alerts["groups"] for rule in group["rules"]]
    for rule in rules:
        assert rule["alert"] and rule["expr"], rule
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
    exprs = " ".join(rule["expr"] for rule in rules)
    for needed in (
        "hermes_queue_queue_oldest_ready_age_seconds",  # oldest ready run waits too long
        "hermes_queue_workers",  # no live workers ...
        'hermes_queue_queue_depth{state="ready"}',  # ... while runs are ready
        'hermes_queue_runs_total{outcome="failed"}',  # failure rate
        "hermes_queue_redis_up",  # Redis unreachable
    ):
        assert needed in exprs, needed


def test_autoscalers_target_desired_workers() -> None:
    deployments = {d["metadata"]["name"] for d in k8s("Deployment")}
    workers = {name for name in deployments if "worker" in name}
    (scaled,) = k8s("ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] in workers
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert "hermes_queue_desired_workers" in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) == 1  # replicas = desired workers
    hpa = k8s_one("HorizontalPodAutoscaler", "hermes-queue-worker")
    assert hpa["spec"]["scaleTargetRef"]["name"] in workers
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "hermes_queue_desired_workers"
    for obj in k8s("HorizontalPodAutoscaler"):
        assert obj["spec"]["scaleTargetRef"]["name"] in deployments


# --- settings -------------------------------------------------------------------------------

_ENV = re.compile(r"\bHERMES_QUEUE_[A-Z0-9_]+")


def test_every_hermes_queue_variable_is_a_setting() -> None:
    seen: dict[str, set[str]] = {}
    for path in TEXT_FILES:
        for var in _ENV.findall(path.read_text(encoding="utf-8")):
            seen.setdefault(var, set()).add(rel(path))
    assert "HERMES_QUEUE_REDIS_URL" in seen
    unknown = {
        var: sorted(where)
        for var, where in seen.items()
        if var != CONFIG_FILE_VAR
        and var not in PENDING_VARS
        and var[len(ENV_PREFIX) :].lower() not in SETTING_NAMES
    }
    assert not unknown, f"not settings (typo?): {unknown}"


def _interpolate(value: Any) -> str:
    """Compose-style ``${VAR}``, ``${VAR:-default}``, ``${VAR:?message}`` with stand-ins."""

    def one(match: re.Match[str]) -> str:
        _name, op, arg = match.group(1), match.group(2), match.group(3)
        return arg if op in {":-", "-"} else "placeholder-secret-0123456789"

    return re.sub(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}", one, str(value))


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in final_stage():
        if ins.keyword == "ENV":
            for pair in shlex.split(ins.rest):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def compose_settings(service: str) -> Settings:
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(ENV_PREFIX)}
    raw = compose()["services"][service].get("environment", {})
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    env.update({k: _interpolate(v) for k, v in raw.items()})
    return load_settings(environ=env)


def k8s_settings() -> Settings:
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(ENV_PREFIX)}
    env.update(k8s_one("ConfigMap", "hermes-queue")["data"])
    env.update(k8s_one("Secret", "hermes-queue")["stringData"])
    return load_settings(environ={k: v for k, v in env.items() if k not in PENDING_VARS})


def test_setting_values_load() -> None:
    """The values are valid too (types, validation), not just the names."""
    for service in ("api", "worker", "migrate"):
        settings = compose_settings(service)
        assert settings.store.url.startswith("postgresql://"), "several containers: PostgreSQL"
        assert not settings.store.migrate_on_start, "the migrate service applies migrations"
    settings = k8s_settings()
    assert settings.store.url.startswith("postgresql://")
    assert not settings.store.migrate_on_start, "the migrate Job applies migrations"
    assert settings.api.host == "0.0.0.0" and settings.metrics.host == "0.0.0.0"


def test_secret_example_holds_placeholders_only() -> None:
    secret = k8s_one("Secret", "hermes-queue")
    assert "data" not in secret, "base64 `data` hides what is in it: use stringData"
    for key, value in secret["stringData"].items():
        assert "change-me" in value, f"{key} looks like a real secret"
    assert "${HERMES_QUEUE_API_KEY" in (DEPLOY / "docker-compose.yml").read_text()


def _duration_seconds(text: str) -> float:
    """nginx / compose durations: ``90``, ``45s``, ``1m30s``, ``2h``, ``500ms``."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|)", str(text).strip())
    assert parts and "".join(n + u for n, u in parts) == str(text).strip(), text
    return sum(float(n) * units[u] for n, u in parts)


def test_worker_grace_periods_exceed_drain_seconds() -> None:
    drain = compose_settings("worker").worker.drain_seconds
    grace = _duration_seconds(compose()["services"]["worker"]["stop_grace_period"])
    assert grace > drain, f"compose worker: stop_grace_period {grace}s <= drain_seconds {drain}"
    drain = k8s_settings().worker.drain_seconds
    for deployment in k8s("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            args = container.get("args", image_default_args())
            if is_our_image(container["image"]) and args[:1] == ["worker"]:
                grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                assert grace > drain, f"{deployment['metadata']['name']}: {grace}s <= {drain}s"


def test_compose_api_grace_period_covers_its_drain() -> None:
    api = compose_settings("api").api
    drain = api.drain_grace_seconds + api.stream_drain_seconds
    grace = _duration_seconds(compose()["services"]["api"]["stop_grace_period"])
    assert grace > drain, f"compose api: stop_grace_period {grace}s <= its drain {drain}s"


# --- docker compose -------------------------------------------------------------------------


def test_compose_topology() -> None:
    services = compose()["services"]
    redis = " ".join(map(str, services["redis"]["command"]))
    assert "--appendonly yes" in redis, "Redis must persist with AOF"
    assert "--maxmemory-policy noeviction" in redis, "evicting jobs or runs loses runs"
    assert services["postgres"]["image"].startswith("postgres")
    for name in ("api", "worker"):
        assert services[name]["deploy"]["replicas"] == 2, name
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
    assert services["migrate"]["command"] == ["migrate"]
    for name in ("nginx", "prometheus", "grafana"):
        assert name in services


def test_compose_mounts_and_build_paths_exist() -> None:
    doc = compose()
    for name, service in doc["services"].items():
        build = service.get("build")
        if build:
            context = (DEPLOY / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in doc["volumes"], f"{name}: undeclared volume {source}"


def compose_env(service: str, **given: str) -> dict[str, str]:
    """A service's environment as compose would give it, ``given`` standing for the shell's."""
    raw = compose()["services"][service].get("environment", {})
    env = {k: _interpolate(v) for k, v in raw.items()}
    for name, value in given.items():
        if name in env:
            env[name] = value
    return env


def test_compose_traces_only_when_asked_and_offers_a_backend() -> None:
    """Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT is given; the optional Jaeger (profile
    ``tracing``) receives OTLP where the docs say, and Grafana has it as a data source."""
    services = compose()["services"]
    for name in ("api", "worker"):
        assert not tracing.wanted(compose_env(name)), f"{name} traces by default"
        env = compose_env(name, OTEL_EXPORTER_OTLP_ENDPOINT="http://jaeger:4318")
        assert tracing.wanted(env) and env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        # The image has the otel extra, so the variable is all it takes.
        assert "otel" in _interpolate(services[name]["build"]["args"]["EXTRAS"])
    jaeger = services["jaeger"]
    assert jaeger["profiles"] == ["tracing"], "the trace backend is optional"
    assert "4318" in {str(port) for port in jaeger["expose"]}
    assert "http://jaeger:4318" in (DEPLOY / "docker-compose.yml").read_text()
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318" in DOCS.read_text()
    (datasources,) = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "jaeger.yml")
    (source,) = datasources["datasources"]
    assert source["type"] == "jaeger"
    host, port = source["url"].removeprefix("http://").split(":")
    assert host in services and any(p.endswith(f":{port}") for p in services[host]["ports"])
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^otel = \[", pyproject, re.MULTILINE), "the otel extra"


def _mount_targets(service: str) -> set[str]:
    return {v.split(":")[1] for v in compose()["services"][service].get("volumes", [])}


def test_prometheus_scrapes_api_and_workers() -> None:
    (config,) = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    api, worker = jobs["hermes-queue-api"], jobs["hermes-queue-worker"]
    api_settings = compose_settings("api")
    # /metrics needs the key unless metrics_public: a bearer token read from a file.
    if not api_settings.metrics.public:
        credentials = api["authorization"]["credentials_file"]
        secrets = compose()["services"]["prometheus"]["secrets"]
        assert credentials in {f"/run/secrets/{s['target']}" for s in secrets}, credentials
    assert api["metrics_path"] == "/metrics"
    assert {sd["port"] for sd in api["dns_sd_configs"]} == {api_settings.api.port}
    worker_settings = compose_settings("worker")
    assert worker_settings.metrics.port and worker_settings.metrics.host == "0.0.0.0"
    assert {sd["port"] for sd in worker["dns_sd_configs"]} == {worker_settings.metrics.port}
    # The rule files Prometheus loads are mounted where it looks for them.
    assert set(config["rule_files"]) <= _mount_targets("prometheus")


def test_grafana_provisioning_finds_the_dashboards() -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    (datasources,) = load_yaml(provisioning / "datasources" / "prometheus.yml")
    (providers,) = load_yaml(provisioning / "dashboards" / "hermes-queue.yml")
    assert any(ds["type"] == "prometheus" for ds in datasources["datasources"])
    paths = {p["options"]["path"] for p in providers["providers"]}
    assert paths <= _mount_targets("grafana")
    uids = {ds["uid"] for ds in datasources["datasources"]}
    assert DASHBOARDS
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        assert dashboard["uid"] and dashboard["title"]
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids)), "duplicate panel ids"
        for panel in dashboard["panels"]:
            if panel["type"] != "row":
                assert panel.get("targets"), panel["title"]
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["current"]["value"] in uids


# --- nginx ----------------------------------------------------------------------------------


@dataclass
class Directive:
    name: str
    args: list[str]
    block: list[Directive] | None

    def children(self, name: str) -> list[Directive]:
        return [d for d in self.block or [] if d.name == name]


_NGINX_TOKEN = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[{};]|[^\s{};\"']+")


def parse_nginx(text: str) -> Directive:
    tokens: list[str] = []
    for line in text.splitlines():
        for token in _NGINX_TOKEN.findall(line):
            if token.startswith("#"):
                break
            tokens.append(token)
    stream = iter(tokens)

    def block() -> list[Directive]:
        out: list[Directive] = []
        words: list[str] = []
        for token in stream:
            if token in {";", "{"}:
                name, *args = words
                out.append(Directive(name, args, block() if token == "{" else None))
                words = []
            elif token == "}":
                return out
            else:
                words.append(token[1:-1] if token[:1] in {'"', "'"} else token)
        assert not words, f"unterminated directive {words}"
        return out

    return Directive("main", [], block())


def nginx_locations(server: Directive) -> Iterator[list[Directive]]:
    """Each location with the chain of blocks above it (server first)."""

    def visit(chain: list[Directive]) -> Iterator[list[Directive]]:
        for location in chain[-1].children("location"):
            yield [*chain, location]
            yield from visit([*chain, location])

    yield from visit([server])


def effective(chain: Iterable[Directive], name: str) -> list[list[str]]:
    """nginx inheritance: the innermost level that sets a directive wins, all of it."""
    for level in reversed(list(chain)):
        found = level.children(name)
        if found:
            return [d.args for d in found]
    return []


def matching_location(server: Directive, uri: str) -> Directive:
    """The location nginx picks for ``uri`` (exact, longest prefix, ^~, regex in order)."""
    exact, prefixes, regexes = None, [], []
    for chain in nginx_locations(server):
        location = chain[-1]
        modifier, pattern = location.args if len(location.args) == 2 else ["", *location.args]
        if modifier == "=" and pattern == uri:
            exact = location
        elif modifier in {"", "^~"} and uri.startswith(pattern):
            prefixes.append((len(pattern), modifier, location))
        elif modifier in {"~", "~*"}:
            flags = re.IGNORECASE if modifier == "~*" else 0
            if re.search(pattern, uri, flags):
                regexes.append(location)
    if exact:
        return exact
    best = max(prefixes, key=lambda p: p[0], default=None)
    if best and best[1] == "^~":
        return best[2]
    if regexes:
        return regexes[0]
    assert best, f"no nginx location for {uri}"
    return best[2]


def test_nginx_keeps_sse_unbuffered() -> None:
    root = parse_nginx((DEPLOY / "nginx" / "nginx.conf").read_text(encoding="utf-8"))
    (http,) = root.children("http")
    upstreams = {u.args[0]: u for u in http.children("upstream")}
    servers = http.children("server")
    assert upstreams and servers
    for upstream in upstreams.values():
        assert upstream.children("keepalive"), f"upstream {upstream.args[0]}: no keepalive pool"
    assert not any(
        "x-accel-buffering" in (arg.lower() for arg in d.args)
        for d in walk_nginx(root)
        if d.name == "proxy_ignore_headers"
    ), "X-Accel-Buffering from the API must be honoured"

    api_locations = 0
    for server in servers:
        for chain in nginx_locations(server):
            chain = [http, *chain]
            proxy_pass = chain[-1].children("proxy_pass")
            if not proxy_pass:
                continue
            target = proxy_pass[0].args[0].removeprefix("http://").split("/", 1)[0]
            assert target in upstreams, f"proxy_pass to unknown upstream {target}"
            api_locations += 1
            where = f"location {' '.join(chain[-1].args)}"

            def value(name: str, chain: list[Directive] = chain) -> str | None:
                found = effective(chain, name)
                return " ".join(found[-1]) if found else None

            assert value("proxy_buffering") == "off", f"{where}: proxy_buffering must be off"
            assert value("proxy_cache") in {None, "off"}, f"{where}: no proxy cache"
            assert value("proxy_request_buffering") == "off", where
            assert value("proxy_http_version") == "1.1", f"{where}: HTTP/1.1 upstream"
            # Keepalive to the upstream needs the hop-by-hop Connection header cleared.
            assert ["Connection", ""] in effective(chain, "proxy_set_header"), where
            assert value("gzip") in {None, "off"}, f"{where}: gzip buffers event streams"
            read_timeout = _duration_seconds(value("proxy_read_timeout") or "60s")
            assert read_timeout >= 3600, f"{where}: proxy_read_timeout {read_timeout}s < 1h"
    assert api_locations, "no location proxies to the API"

    # The streaming endpoints land in an API location.
    for server in servers:
        for uri in (
            "/v1/runs/run_x/events",
            "/api/sessions/s/chat/stream",
            "/v1/chat/completions",
            "/v1/queue/stream",
        ):
            assert matching_location(server, uri).children("proxy_pass"), uri


def walk_nginx(directive: Directive) -> Iterator[Directive]:
    yield directive
    for child in directive.block or []:
        yield from walk_nginx(child)


# --- kubernetes -----------------------------------------------------------------------------


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_kustomizations_list_existing_files() -> None:
    kustomizations = sorted(K8S.rglob("kustomization.yaml"))
    assert len(kustomizations) >= 5  # base, image, migrate, autoscaling, monitoring
    for path in kustomizations:
        (kustomization,) = load_yaml(path)
        for resource in kustomization.get("resources", []):
            assert (path.parent / resource).is_file(), f"{rel(path)}: {resource}"
        for component in kustomization.get("components", []):
            assert (path.parent / component / "kustomization.yaml").is_file(), component
        assert "secret.example.yaml" not in kustomization.get("resources", []), "a template"


def test_deployments_have_probes_and_run_hardened() -> None:
    deployments = {d["metadata"]["name"]: d for d in k8s("Deployment")}
    assert {"hermes-queue-api", "hermes-queue-worker"} <= set(deployments)
    configmaps = {c["metadata"]["name"] for c in k8s("ConfigMap")}
    secrets = {s["metadata"]["name"] for s in k8s("Secret")}
    for name, deployment in deployments.items():
        spec = deployment["spec"]
        pod = spec["template"]["spec"]
        assert _selects(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        for container in pod["containers"]:
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                assert probe in container, f"{name}: no {probe}"
                port = container[probe].get("httpGet", {}).get("port")
                if isinstance(port, str):
                    assert port in ports, f"{name} {probe}: unknown port {port}"
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name


def test_api_probe_and_ports_match_the_settings() -> None:
    settings = k8s_settings()
    api = k8s_one("Deployment", "hermes-queue-api")
    (container,) = api["spec"]["template"]["spec"]["containers"]
    assert {p["containerPort"] for p in container["ports"]} == {settings.api.port}
    # /health is the public liveness endpoint; /health/detailed would need the bearer key.
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    worker = k8s_one("Deployment", "hermes-queue-worker")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert {p["containerPort"] for p in container["ports"]} == {settings.metrics.port}


def test_services_and_disruption_budgets_select_pods() -> None:
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in k8s("Deployment")]
    for obj in k8s("Service"):
        selector = obj["spec"]["selector"]
        assert any(_selects(selector, labels) for labels in pod_labels), obj["metadata"]["name"]
    budgets = k8s("PodDisruptionBudget")
    assert len(budgets) >= 2
    for obj in budgets:
        selector = obj["spec"]["selector"]["matchLabels"]
        assert any(_selects(selector, labels) for labels in pod_labels), obj["metadata"]["name"]
