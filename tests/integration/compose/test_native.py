"""The translation :class:`~tests.integration.compose.native.NativeStack` makes of
docker-compose.yml, checked without starting anything: every service reaches another at the port
that one listens on, shared volumes are shared directories, and nothing but addresses and volume
paths changes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from tests.compose_file import command, environment
from tests.integration.compose.native import NativeStack, kafka_property, new_cluster_id


def test_kafka_variables_become_properties_as_the_apache_kafka_image_names_them() -> None:
    assert kafka_property("KAFKA_NODE_ID") == "node.id"
    assert kafka_property("KAFKA_CONTROLLER_QUORUM_VOTERS") == "controller.quorum.voters"
    assert kafka_property("KAFKA_LISTENER_NAME_INTERNAL_SSL__KEY") == (
        "listener.name.internal.ssl_key"
    )
    assert kafka_property("KAFKA_SASL_ENABLED___MECHANISMS") == "sasl.enabled-mechanisms"


def test_cluster_ids_are_never_taken_for_options() -> None:
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not [i for i in ids if i.startswith("-") or len(i) != 22]


def test_every_address_points_where_its_service_listens(tmp_path: Path) -> None:
    stack = NativeStack(tmp_path)
    kafka, serve, job = stack.env("kafka"), stack.env("streamdi"), stack.env("tpcdi")
    listeners = dict(u.split("://") for u in kafka["KAFKA_LISTENERS"].split(","))
    assert listeners["PLAINTEXT"].startswith("127.0.0.1:")
    assert kafka["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{listeners['PLAINTEXT']}"
    assert kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@{listeners['CONTROLLER']}"
    assert kafka["KAFKA_LOG_DIRS"] == str(tmp_path / "volumes" / "kafka-data")
    for env in (serve, job):
        assert env["KAFKA__BOOTSTRAP_SERVERS"] == listeners["PLAINTEXT"]
        dsn = urlsplit(env["POSTGRES__DSN"])
        assert (dsn.hostname, dsn.port) == ("127.0.0.1", stack.port("postgres", 5432))
        assert (dsn.username, dsn.password, dsn.path) == ("streamdi", "streamdi", "/warehouse")
    master = stack.args("spark-master")
    port = master[master.index("--port") + 1]
    assert master[master.index("--host") + 1] == "127.0.0.1"
    assert stack.args("spark-worker")[-1] == f"spark://127.0.0.1:{port}"
    assert serve["SPARK__MASTER"] == job["SPARK__MASTER"] == f"spark://127.0.0.1:{port}"
    assert serve["API__HOST"] == "127.0.0.1"
    assert serve["API__PORT"] == str(stack.port("streamdi", 8000))
    assert len(set(stack.ports.values())) == len(stack.ports), "one host port per service port"


def test_only_addresses_and_volume_paths_change(tmp_path: Path) -> None:
    stack = NativeStack(tmp_path)
    for name in stack.compose["services"]:
        given, native = environment(stack.spec(name)), stack.env(name)
        assert set(given) == set(native)
        for key, value in given.items():
            if native[key] != value:
                ports = {str(p) for p in stack.ports.values()}
                assert (
                    "127.0.0.1" in native[key]
                    or native[key].startswith(str(tmp_path))
                    or native[key] in ports  # a listening port (API__PORT)
                ), key
    job = stack.args("tpcdi")
    assert job[:4] == command(stack.spec("tpcdi"))[:4] == ["tpcdi", "run", "--sf", "0.1"]
    assert stack.env("postgres")["POSTGRES_USER"] == "streamdi"


def test_services_sharing_a_volume_share_its_directory(tmp_path: Path) -> None:
    stack = NativeStack(tmp_path)
    job, worker = stack.args("tpcdi"), stack.args("spark-worker")
    workdir = Path(job[job.index("--workdir") + 1])
    spark_work = Path(worker[worker.index("--work-dir") + 1])
    assert workdir.parent == spark_work.parent == tmp_path / "volumes" / "tpcdi-state"
    assert stack.env("tpcdi")["STREAMDI__STATE_DIR"] == str(workdir.parent)
    assert stack.env("streamdi")["STREAMDI__STATE_DIR"] == str(
        tmp_path / "volumes" / "streamdi-state"
    )
