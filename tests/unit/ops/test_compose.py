"""The compose stack checked without a Docker engine: the file parses, every image is pinned,
every variable a streamdi service sets is a setting and validates through the settings tree,
services reference each other at the ports they listen on, healthchecks probe those ports, and
dependencies wait for health."""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any
from urllib.parse import urlsplit

import pytest

from cli.main import build_parser
from runtime.runspec import load_run_spec
from streamdi.environment import required_settings, setting_names, settings_from
from tests.compose_file import (
    REPO,
    command,
    dockerfile_env,
    dockerfile_instructions,
    environment,
    load_compose,
)

COMPOSE = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
STREAMDI_IMAGE = f"streamdi:{VERSION}"
STREAMDI_SERVICES = sorted(n for n, s in SERVICES.items() if s["image"] == STREAMDI_IMAGE)
#: Services that run a pipeline: in a container they must reach the stack's Kafka, PostgreSQL
#: and Spark (the embedded broker and PostgreSQL would live and die inside the container).
PIPELINE_SERVICES = ("streamdi", "tpcdi")
STACK_SETTINGS = ("KAFKA__BOOTSTRAP_SERVERS", "POSTGRES__DSN", "SPARK__MASTER")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


#: Images whose releases are numbered MAJOR.MINOR (PostgreSQL 17.2 is one exact release);
#: every other image needs MAJOR.MINOR.PATCH (python:3.11 would float across 3.11.x).
VERSION_PARTS = {"postgres": 2}


def pinned(image: str) -> bool:
    """An exact version tag (an optional variant after it) or a digest; never latest."""
    if "@sha256:" in image:
        return re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", image) is not None
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return False
    parts = VERSION_PARTS.get(name, 3)
    version = r"\d+" + r"\.\d+" * (parts - 1)
    return re.fullmatch(version + r"(-[a-z][a-z0-9.]*)*", tag) is not None


def long_running(name: str) -> bool:
    return not SERVICES[name].get("profiles") and SERVICES[name].get("restart") != "no"


def listen_ports(name: str) -> set[int]:
    """The ports a service listens on, from its own configuration."""
    service = SERVICES[name]
    env = environment(service)
    args = command(service)
    if name == "kafka":
        return {int(u.rsplit(":", 1)[1]) for u in env["KAFKA_LISTENERS"].split(",")}
    if name == "postgres":
        return {int(env.get("PGPORT", "5432"))}
    if service["image"] == STREAMDI_IMAGE:
        ports = {int(args[i + 1]) for i, a in enumerate(args) if a in ("--port", "--webui-port")}
        if args and args[0] == "serve":
            ports.add(settings_of(name).api.port)
        return ports
    raise AssertionError(f"no rule for the ports of service {name}")


def probed(name: str) -> set[tuple[str, int]]:
    """``(host, port)`` pairs the service's healthcheck probes."""
    test = SERVICES[name]["healthcheck"]["test"]
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), test
    args = test[1:]
    found: set[tuple[str, int]] = set()
    if args[:3] == ["python", "-m", "streamdi.probe"]:
        for url in args[3:]:
            parts = urlsplit(url)
            assert parts.hostname and parts.port, url
            found.add((parts.hostname, parts.port))
    elif args[0] == "pg_isready":
        found.add((args[args.index("-h") + 1], int(args[args.index("-p") + 1])))
    elif args[0].endswith("kafka-broker-api-versions.sh"):
        host, port = args[args.index("--bootstrap-server") + 1].rsplit(":", 1)
        found.add((host, int(port)))
    else:
        raise AssertionError(f"unknown healthcheck of {name}: {test}")
    return found


def settings_of(name: str) -> Any:
    """The settings a container of the streamdi image builds: the image's ENV, then the
    service's environment (nothing of this process's environment)."""
    env = {k: v for k, v in dockerfile_env().items() if k.upper() in setting_names()}
    env.update(environment(SERVICES[name]))
    return settings_from(env)


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


# -- the file and its images ------------------------------------------------------------------------


def test_compose_parses_with_the_expected_services_and_volumes() -> None:
    assert set(SERVICES) >= {"kafka", "postgres", "spark-master", "spark-worker", "streamdi"}
    assert set(SERVICES) >= {"tpcdi"}
    assert STREAMDI_SERVICES == ["spark-master", "spark-worker", "streamdi", "tpcdi"]
    assert SERVICES["tpcdi"]["profiles"] == ["tpcdi"]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_image_is_pinned(name: str) -> None:
    image = SERVICES[name]["image"]
    assert pinned(image), f"{name}: image {image!r} is not pinned to an exact version or digest"


def test_the_compose_kafka_is_the_release_the_embedded_broker_runs() -> None:
    """Issue 17: the stack deploys the Apache Kafka the tests run (ingest/kafka_dist.py)."""
    from ingest.kafka_dist import KAFKA_VERSION

    image = SERVICES["kafka"]["image"]
    assert image == f"apache/kafka:{KAFKA_VERSION}", image


def test_the_compose_kafka_environment_is_a_kraft_node_of_kafka_4() -> None:
    """Kafka 4 runs KRaft only: the node is broker and controller with a static voter set on its
    own controller listener, and sets nothing of ZooKeeper mode (removed in 4.0)."""
    env = environment(SERVICES["kafka"])
    assert not [k for k in env if "ZOOKEEPER" in k or k == "KAFKA_BROKER_ID"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    listeners = dict(u.split("://") for u in env["KAFKA_LISTENERS"].split(","))
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert voters == [f"{node}@kafka:{listeners[controller].rsplit(':', 1)[1]}"]
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    advertised = env["KAFKA_ADVERTISED_LISTENERS"]
    assert controller not in advertised  # a controller listener is never advertised
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in listeners
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"  # streamdi creates its topics


def test_the_streamdi_image_is_built_here_and_tagged_with_the_project_version() -> None:
    for name in STREAMDI_SERVICES:
        assert SERVICES[name]["build"]["context"] == "."
        assert SERVICES[name]["build"]["dockerfile"] == "Dockerfile"


def test_pinned_rejects_floating_tags() -> None:
    assert not pinned("postgres:latest")
    assert not pinned("postgres")
    assert not pinned("apache/kafka:3")
    assert not pinned("python:3.11-slim")
    assert not pinned("postgres:17")
    assert pinned("postgres:17.2-bookworm")
    assert pinned("python:3.11.11-slim-bookworm")
    assert pinned("apache/kafka@sha256:" + "a" * 64)


def test_dockerfile_base_images_are_pinned_and_the_image_runs_as_a_user() -> None:
    steps = dockerfile_instructions()
    bases = [rest.split()[0] for word, rest in steps if word == "FROM"]
    assert bases, "the Dockerfile has no FROM"
    for base in bases:
        assert pinned(base), f"base image {base!r} is not pinned"
    users = [rest for word, rest in steps if word == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    installs = " ".join(rest for word, rest in steps if word == "RUN")
    assert "openjdk-17-jre-headless" in installs
    entry = [rest for word, rest in steps if word == "ENTRYPOINT"]
    assert entry and "streamdi" in entry[-1]


def test_dockerfile_copies_every_package_the_project_installs() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {rest.split()[0] for word, rest in dockerfile_instructions() if word == "COPY"}
    assert packages <= copied, f"not copied into the image: {packages - copied}"
    ignore = (REPO / ".dockerignore").read_text().split()
    assert all(f"!{p}/" in ignore for p in packages)


# -- the environment of the streamdi services --------------------------------------------------------


@pytest.mark.parametrize("name", STREAMDI_SERVICES)
def test_every_variable_a_streamdi_service_sets_is_a_setting(name: str) -> None:
    known = setting_names()
    unknown = sorted(k for k in environment(SERVICES[name]) if k.upper() not in known)
    assert not unknown, f"{name} sets variables no setting reads: {unknown}"


def test_every_settings_variable_of_the_image_is_a_setting() -> None:
    image = dockerfile_env()
    named = [k for k in image if "__" in k]
    assert named, "the image sets no streamdi defaults"
    assert not [k for k in named if k.upper() not in setting_names()]


@pytest.mark.parametrize("name", STREAMDI_SERVICES)
def test_a_streamdi_service_environment_validates_and_sets_every_required_setting(
    name: str,
) -> None:
    env = {k.upper() for k in environment(SERVICES[name])} | {
        k for k in dockerfile_env() if "__" in k
    }
    required = set(required_settings())
    if name in PIPELINE_SERVICES:
        required |= set(STACK_SETTINGS)
    assert required <= env, f"{name} does not set {sorted(required - env)}"
    settings = settings_of(name)  # raises ConfigurationError naming any bad value
    assert str(settings.streamdi.state_dir) == "/var/lib/streamdi"


def test_settings_from_rejects_what_a_service_could_get_wrong() -> None:
    from streamdi.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as bad:
        settings_from({"KAFKA__BOOTSTRAP_SERVER": "kafka:9092", "API__PORT": "http"})
    names = [name for name, _ in bad.value.problems]
    assert names == ["KAFKA__BOOTSTRAP_SERVER", "API__PORT"]
    assert "did you mean KAFKA__BOOTSTRAP_SERVERS" in bad.value.problems[0][1]


def test_every_streamdi_command_parses() -> None:
    parser = build_parser()
    for name in STREAMDI_SERVICES:
        args = command(SERVICES[name])
        if args[0].startswith("org.apache.spark"):
            continue
        parsed = parser.parse_args(args)
        assert parsed.handler is not None, args


def test_the_served_spec_loads_from_the_package() -> None:
    serve = command(SERVICES["streamdi"])
    assert serve[0] == "serve"
    spec = load_run_spec(serve[1])
    assert "puts" in spec.flow.sources


def test_the_spark_cluster_runs_from_the_streamdi_image() -> None:
    master, worker = SERVICES["spark-master"], SERVICES["spark-worker"]
    assert master["entrypoint"][-1] == worker["entrypoint"][-1] == "spark-class"
    assert command(master)[0] == "org.apache.spark.deploy.master.Master"
    master_args = command(master)
    host = master_args[master_args.index("--host") + 1]
    port = master_args[master_args.index("--port") + 1]
    assert host == "spark-master"
    assert command(worker)[0] == "org.apache.spark.deploy.worker.Worker"
    assert command(worker)[-1] == f"spark://{host}:{port}"
    assert settings_of("streamdi").spark.master == f"spark://{host}:{port}"


def test_the_tpcdi_workdir_is_shared_with_the_spark_worker_at_the_same_path() -> None:
    args = command(SERVICES["tpcdi"])
    workdir = args[args.index("--workdir") + 1]

    def mounts(name: str) -> dict[str, str]:
        return {v.split(":")[1]: v.split(":")[0] for v in SERVICES[name].get("volumes", [])}

    job = [(t, v) for t, v in mounts("tpcdi").items() if workdir.startswith(t)]
    assert job, f"{workdir} is not on a volume of the tpcdi service"
    target, volume = job[0]
    assert mounts("spark-worker").get(target) == volume


# -- ports, healthchecks, dependencies, volumes -------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_long_running_service_has_a_healthcheck_probing_its_own_port(name: str) -> None:
    if not long_running(name):
        assert "healthcheck" not in SERVICES[name] or name == "tpcdi"
        return
    assert "healthcheck" in SERVICES[name], f"{name} has no healthcheck"
    pairs = probed(name)
    listening = listen_ports(name)
    assert pairs, name
    for host, port in pairs:
        assert host in LOOPBACK, f"{name}: a healthcheck probes the container itself ({host})"
        assert port in listening, (
            f"{name}: the healthcheck probes {port}, it listens on {listening}"
        )


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_published_ports_are_ports_the_service_listens_on(name: str) -> None:
    for mapping in SERVICES[name].get("ports", []):
        container = int(str(mapping).rsplit(":", 1)[1].split("/")[0])
        assert container in listen_ports(name), f"{name} publishes {container}"


def test_the_service_port_is_published_and_probed() -> None:
    port = settings_of("streamdi").api.port
    published = [str(p).rsplit(":", 1)[1] for p in SERVICES["streamdi"]["ports"]]
    assert str(port) in published
    assert ("127.0.0.1", port) in probed("streamdi")
    assert settings_of("streamdi").api.host == "0.0.0.0"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_dependencies_exist_and_wait_for_health(name: str) -> None:
    for dependency, condition in (SERVICES[name].get("depends_on") or {}).items():
        assert dependency in SERVICES
        assert condition == {"condition": "service_healthy"}, (name, dependency)
        assert "healthcheck" in SERVICES[dependency]


def test_named_volumes_are_declared_and_used() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    used = {
        v.split(":")[0]
        for s in SERVICES.values()
        for v in s.get("volumes", [])
        if not v.startswith((".", "/"))
    }
    assert used == declared
    for name in ("kafka", "postgres", "streamdi"):
        assert SERVICES[name].get("volumes"), f"{name} keeps its data in a named volume"


def test_interpolation_takes_the_callers_values() -> None:
    given = load_compose({"STREAMDI_POSTGRES_PASSWORD": "s3cret", "STREAMDI_SPEC": "a.b:c"})
    services = given["services"]
    assert environment(services["postgres"])["POSTGRES_PASSWORD"] == "s3cret"
    assert "s3cret@postgres" in environment(services["streamdi"])["POSTGRES__DSN"]
    assert command(services["streamdi"]) == ["serve", "a.b:c"]


@pytest.mark.parametrize("name", STREAMDI_SERVICES)
def test_the_settings_a_container_builds_are_the_process_settings_of_that_environment(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``StreamdiSettings`` itself, reading a process environment that is exactly the
    container's, builds the same settings as the isolated check above."""
    from streamdi.settings import load_settings

    for variable in list(os.environ):
        if variable.upper() in setting_names():
            monkeypatch.delenv(variable)
    env = {k: v for k, v in dockerfile_env().items() if k.upper() in setting_names()}
    env.update(environment(SERVICES[name]))
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    built = load_settings()
    assert built.model_dump(mode="json") == settings_of(name).model_dump(mode="json")
    if name in PIPELINE_SERVICES:
        assert built.kafka.bootstrap_servers == "kafka:9092"
        assert built.spark.master == "spark://spark-master:7077"
