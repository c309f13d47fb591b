"""The one settings tree of streamdi.

Every setting has an environment name built from its path with ``__`` between levels:
``KAFKA__BOOTSTRAP_SERVERS``, ``POSTGRES__DSN``, ``ENGINE__EXECUTOR``, ``STREAMDI__STATE_DIR``.
Explicit arguments beat the environment. Secrets are ``SecretStr`` and never printed.

Settings are built by :func:`load_settings` inside ``main()`` or an app factory, never at import, so
that tests and embedded runs can pass their own values. A bad value raises
:class:`~streamdi.errors.ConfigurationError` naming each setting and what it expects.

Later issues extend the sections; keep each section small and documented field by field.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamdi.errors import ConfigurationError

#: The names ENGINE__EXECUTOR accepts: every name ``etl_dataflows.executors.create_executor``
#: takes (``etl_dataflows.executors.executor_names()``; the base imports no stage, so the list is
#: written here and tests/unit/streamdi/test_settings.py keeps the two equal).
ExecutorName = Literal[
    "serial",
    "local",
    "local:sequential",
    "local:waves",
    "local:chains",
    "local:chain_scan",
    "local:lock",
    "local:pat",
    "local:tstream",
    "lock",
    "pat",
    "tstream",
    "spark",
    "spark:driver",
    "spark:spark",
    "spark:supersteps",
]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


class ServiceSettings(BaseModel):
    """Process-wide settings (``STREAMDI__*``)."""

    state_dir: Path = Field(
        default=Path(".streamdi"),
        description="Directory for streamdi's own files: staging DuckDB, embedded PostgreSQL data, "
        "reports. Created on first use.",
    )
    log_level: LogLevel = Field(default="INFO", description="Root log level.")
    log_format: Literal["text", "logfmt", "json"] = Field(
        default="text",
        description="Log line format: text (for people), logfmt (key=value fields) or json "
        "(one object per line).",
    )


class KafkaSettings(BaseModel):
    """Where events travel (``KAFKA__*``)."""

    bootstrap_servers: str | None = Field(
        default=None,
        description="Comma-separated host:port list of an external Kafka. Unset: streamdi "
        "starts the embedded broker, Apache Kafka as a child process with its log under "
        "<state_dir>/kafka.",
    )
    embedded_jars: Path | None = Field(
        default=None,
        description="Folder holding the embedded broker's Apache Kafka jars. Unset: they are "
        "fetched once from KAFKA__MAVEN_REPOSITORY into ~/.cache/streamdi/kafka-<version> "
        "($XDG_CACHE_HOME honoured).",
    )
    maven_repository: str = Field(
        default="https://repo1.maven.org/maven2",
        description="Maven repository the embedded broker's jars are fetched from (Maven "
        "Central, or a mirror); each jar's SHA-256 is checked against the pinned list.",
    )
    embedded_heap_mb: int = Field(
        default=512, ge=128, le=65_536, description="Java heap of the embedded broker (MiB)."
    )
    embedded_start_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest wait for the embedded broker to answer at start.",
    )
    embedded_reuse_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest wait for an embedded broker already running on the state "
        "directory (left by a killed streamdi, or another process's) to answer before it is "
        "killed and replaced on the same log.",
    )
    external_start_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest wait for the external Kafka of KAFKA__BOOTSTRAP_SERVERS to answer "
        "at start before streamdi gives up.",
    )
    client_id: str = Field(default="streamdi", description="Client id sent to the broker.")
    max_record_bytes: int = Field(
        default=900_000,
        gt=1024,
        le=1_048_576,
        description="Largest Kafka record the collector produces (below Kafka's 1 MiB default).",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="How clients talk to the brokers (TLS, SASL or both)."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism (with SASL_PLAINTEXT or SASL_SSL)."
    )
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(default=None, description="SASL password (secret).")
    ssl_cafile: Path | None = Field(
        default=None, description="CA certificate file that signed the brokers' certificates."
    )
    ssl_certfile: Path | None = Field(
        default=None, description="Client certificate file (mutual TLS)."
    )
    ssl_keyfile: Path | None = Field(default=None, description="Client private key file.")
    ssl_password: SecretStr | None = Field(
        default=None, description="Password of the client key (secret)."
    )
    ssl_check_hostname: bool = Field(
        default=True, description="Check that a broker's certificate names its host."
    )

    @field_validator("sasl_mechanism", mode="before")
    @classmethod
    def _empty_mechanism(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL"):
            missing = [
                name
                for name, value in (
                    ("KAFKA__SASL_MECHANISM", self.sasl_mechanism),
                    ("KAFKA__SASL_USERNAME", self.sasl_username),
                    ("KAFKA__SASL_PASSWORD", self.sasl_password),
                )
                if value is None
            ]
            if missing:
                raise ValueError(
                    f"KAFKA__SECURITY_PROTOCOL={self.security_protocol} needs " + ", ".join(missing)
                )
        elif self.sasl_mechanism is not None:
            raise ValueError(
                "KAFKA__SASL_MECHANISM needs KAFKA__SECURITY_PROTOCOL SASL_PLAINTEXT or SASL_SSL"
            )
        return self

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_servers(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        servers = [s.strip() for s in value.split(",")]
        bad = [s for s in servers if not _HOST_PORT.match(s)]
        if bad:
            raise ValueError("expected host:port[,host:port...]")
        return ",".join(servers)


class IngestSettings(BaseModel):
    """Collecting events into Kafka and consuming them into the engine (``INGEST__*``)."""

    batch_events: int = Field(
        default=10_000,
        ge=1,
        description="The collector closes a logical batch at this many events.",
    )
    batch_ms: int = Field(
        default=1_000,
        ge=1,
        description="The collector closes a logical batch this long after its "
        "first event, even if it is not full.",
    )
    allowed_lateness_ms: int | None = Field(
        default=60_000,
        ge=0,
        description="An event whose event time is more than this behind its stream's high mark is "
        "dead-lettered as late. Unset (empty): no lateness check.",
    )
    max_future_ms: int | None = Field(
        default=300_000,
        ge=0,
        description="An event whose event time (_ts) is more than this ahead of the clock is "
        "dead-lettered as out of range and never moves its stream's high mark. Unset (empty): "
        "only the hard limit (the end of year 9999) applies.",
    )
    min_event_time_ms: int = Field(
        default=0,
        ge=-62_135_596_800_000,
        le=253_402_300_799_999,
        description="An event whose event time (_ts) is before this instant (ms since the "
        "epoch; default 1970-01-01) is dead-lettered as out of range. At least 0001-01-01.",
    )
    poll_timeout_ms: int = Field(default=100, ge=1, description="Longest wait of one Kafka poll.")
    partition_idle_ms: int = Field(
        default=2_000,
        ge=0,
        description="A stream read from several partitions applies events only up to the "
        "minimum watermark across them; a partition the consumer has read to its end and that "
        "sent nothing for this long stops holding the others back (its later events older "
        "than that point are late).",
    )
    producer_buffer_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024 * 1024,
        description="Memory the producer may hold for unsent records; a full buffer blocks the "
        "collector (backpressure) instead of growing.",
    )
    commit_group: int = Field(
        default=8, ge=1, description="Most engine batches one staging commit may carry."
    )
    start_from: Literal["earliest", "latest"] = Field(
        default="earliest",
        description="Where a new pipeline (no offsets in staging) starts reading a topic.",
    )
    drain_s: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM, streamdi serve stops taking events, then consumes and commits "
        "what Kafka already holds for up to this long before it stops (0: stop after the batch "
        "in hand).",
    )

    @field_validator("allowed_lateness_ms", "max_future_ms", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class PostgresSettings(BaseModel):
    """The PostgreSQL warehouse (``POSTGRES__*``)."""

    dsn: SecretStr | None = Field(
        default=None,
        description="libpq DSN or URL of an external server (TLS options such as sslmode, "
        "sslrootcert, sslcert, sslkey pass through to libpq). Unset: streamdi starts an "
        "embedded PostgreSQL under STREAMDI__STATE_DIR.",
    )
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = (
        Field(
            default=None,
            description="libpq sslmode for an external server (disable, require, verify-ca, "
            "verify-full...); overrides the DSN's.",
        )
    )
    sslrootcert: Path | None = Field(
        default=None, description="CA certificate file (libpq sslrootcert)."
    )
    sslcert: Path | None = Field(
        default=None, description="Client certificate file (libpq sslcert)."
    )
    sslkey: Path | None = Field(default=None, description="Client private key file (libpq sslkey).")

    @field_validator("sslmode", mode="before")
    @classmethod
    def _empty_sslmode(cls, value: Any) -> Any:
        return None if value == "" else value

    data_dir: Path | None = Field(
        default=None,
        description="Data directory of the embedded server. Unset: <state_dir>/postgres.",
    )
    server_settings: dict[str, str] = Field(
        default_factory=dict,
        description="Server parameters of the embedded server, applied over streamdi's "
        "defaults (warehouse.embedded.EMBEDDED_SERVER_DEFAULTS: shared_buffers 1GB, wal_buffers "
        "64MB, max_wal_size 4GB, checkpoint_timeout 15min), as JSON: "
        '\'{"shared_buffers": "2GB"}\'. Written with ALTER SYSTEM when the server starts; '
        "one that needs a restart restarts it when no other process uses it. Ignored with "
        "POSTGRES__DSN (tune an external server yourself: docs/operations.md).",
    )

    @field_validator("server_settings")
    @classmethod
    def _server_parameter_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z0-9_]+)?", name)]
        if bad:
            raise ValueError(
                f"not PostgreSQL parameter names: {bad} (lower-case names such as shared_buffers)"
            )
        return {name: str(v) for name, v in value.items()}

    fillfactor: int = Field(
        default=70,
        ge=10,
        le=100,
        description="Fill factor (percent) of the warehouse's full tables of state tables: the "
        "room left on each page lets a merge update a row in place (a HOT update), so tables "
        "merged every few seconds do not swell between vacuums. 100 leaves no room.",
    )


MigrationTarget = Literal["postgres", "duckdb"]
MIGRATION_TARGETS: tuple[MigrationTarget, ...] = ("postgres", "duckdb")


def _target_list(value: Any) -> Any:
    """``"postgres,duckdb"`` (or a list) as a tuple of known target names."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(v).strip().lower() for v in items if str(v).strip()]
    bad = [n for n in names if n not in MIGRATION_TARGETS]
    if bad:
        raise ValueError(f"expected a comma-separated list of {MIGRATION_TARGETS} (got {bad})")
    return tuple(dict.fromkeys(names))


class MigrationSettings(BaseModel):
    """Durable migration of staged deltas into the warehouses (``MIGRATION__*``)."""

    targets: str = Field(
        default="",
        description="Comma-separated warehouses to migrate into: postgres, duckdb, or both. "
        "Empty: no migration (deltas stay staged).",
    )
    push: str | None = Field(
        default=None,
        description="Targets the pipeline pushes to (comma-separated). Unset: every target; "
        "empty: none (the others are pulled: on request or when idle).",
    )
    push_batches: int | None = Field(
        default=8, ge=1, description="Push after this many newly staged batches (K)."
    )
    push_ms: int | None = Field(
        default=2_000, ge=1, description="Push when the oldest unpushed batch is this old (T)."
    )
    push_rows: int | None = Field(
        default=100_000, ge=1, description="Push after this many newly staged rows (N)."
    )
    push_on_stop: bool = Field(
        default=True, description="The pipeline pushes what is pending when it stops cleanly."
    )
    pull_idle_ms: int | None = Field(
        default=None,
        ge=1,
        description="Pull into a pull target once it has had no other active query for this "
        "long. Unset: pull only on request (streamdi migrate pull).",
    )
    max_batches_per_load: int = Field(
        default=64, ge=1, description="Most batches one target transaction carries."
    )
    parallel_targets: bool = Field(
        default=True,
        description="Load (and merge) every target of a round at once, a thread each, instead "
        "of one after the other.",
    )
    merge_rows: int = Field(
        default=500_000,
        ge=1,
        description="Merge a target's delta tables into its full tables once they hold this many "
        "rows.",
    )
    merge_ms: int = Field(
        default=30_000, ge=1, description="...or once this long has passed since the last merge."
    )
    retention_s: float = Field(
        default=0.0,
        ge=0,
        description="Keep released deltas (acknowledged by every target) in staging this many "
        "seconds after their batch committed, then delete them.",
    )
    release_ms: int = Field(
        default=1_000,
        ge=0,
        description="Release acknowledged deltas from staging at most this often (0: after "
        "every migration round).",
    )
    retry_ms: int = Field(
        default=2_000, ge=1, description="Wait before retrying an unreachable target."
    )
    schema_name: str | None = Field(
        default=None,
        description="Warehouse schema of the full tables (deltas in <schema>_delta). Unset: the "
        "dataflow's name.",
    )
    duckdb_path: Path | None = Field(
        default=None,
        description="DuckDB warehouse file. Unset: <state_dir>/warehouse.duckdb.",
    )

    @field_validator("targets", "push", mode="before")
    @classmethod
    def _check_targets(cls, value: Any) -> Any:
        if value is None:
            return None
        return ",".join(_target_list(value))

    @field_validator("schema_name")
    @classmethod
    def _check_schema(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", value):
            raise ValueError("expected a lower-case SQL identifier ([a-z_][a-z0-9_]*)")
        return value

    @property
    def target_names(self) -> tuple[MigrationTarget, ...]:
        names: tuple[MigrationTarget, ...] = _target_list(self.targets)
        return names

    @property
    def push_targets(self) -> tuple[MigrationTarget, ...]:
        """Targets the pipeline pushes to (a subset of :attr:`target_names`)."""
        if self.push is None:
            return self.target_names
        chosen = _target_list(self.push)
        return tuple(t for t in self.target_names if t in chosen)


class StagingSettings(BaseModel):
    """The local staging store (``STAGING__*``)."""

    path: Path | None = Field(
        default=None,
        description="DuckDB file of the staging store. Unset: <state_dir>/staging.duckdb.",
    )
    memory_limit: str = Field(default="2GB", description="DuckDB memory_limit for staging.")
    threads: int = Field(
        default=1,
        ge=1,
        le=256,
        description="DuckDB worker threads of the process that holds the staging file. A batch "
        "commit is many small statements that gain nothing from more threads: on two cores one "
        "thread made the commit path cost 35% less CPU at the same speed (docs/benchmarks.md). "
        "Raise it for heavy queries of staging on a machine with cores to spare.",
    )
    recent_cache_mb: int = Field(
        default=256,
        ge=0,
        description="Keep the last commits' deltas in memory (up to this many MiB) so migration "
        "reads them without the file; 0 = always read the file.",
    )
    checkpoint_every_s: float = Field(
        default=3600.0,
        ge=0,
        description="A running pipeline writes a checkpoint of the engine's state (beside the "
        "staging file, <file>.checkpoints/) when the last one is this old and batches committed "
        "since, and at stop when one is due: where `streamdi upgrade reprocess --from BATCH|TIME` "
        "starts. 0 = never (a reprocess can then start only from the first record).",
    )
    checkpoints_keep: int = Field(
        default=3,
        ge=1,
        description="Checkpoints kept (the newest; a seeded file's seed checkpoint is kept too).",
    )


class EngineSettings(BaseModel):
    """The transactional dataflow engine (``ENGINE__*``)."""

    executor: ExecutorName = Field(
        default="local",
        description="Executor running the dataflows: local (compiled, adaptive), spark (local "
        "plus Spark passes for big batches; SPARK__*) or serial (the plain-Python oracle); "
        "local:<strategy> fixes local's strategy (sequential, waves, chains, chain_scan, lock, "
        "pat, tstream), spark:<placement> Spark's placement (driver, spark, supersteps); lock, pat "
        "and tstream are the benchmark baselines.",
    )
    memory_budget: int | None = Field(
        default=None,
        gt=0,
        description="Bytes the driver may spend running one batch of one transactional step "
        "(accepts 512MiB, 1GiB, 2GB...). The spark executor sends a batch whose estimate exceeds "
        "it to Spark. Unset: no limit.",
    )

    batch_size: int = Field(
        default=30_000,
        ge=1,
        le=10_000_000,
        description="Events per engine batch. The default takes three of the collector's "
        "records (INGEST__BATCH_EVENTS 10,000): the engine's and the staging commit's cost per "
        "batch spread over more events, which at 500,000 events/s on two cores cut the p99 "
        "arrival-to-commit from 195-237 ms to 153-160 ms (docs/benchmarks.md). A partial batch "
        "still closes as soon as Kafka has nothing more.",
    )
    batch_timeout_ms: int = Field(
        default=500, ge=1, description="Close a partial batch after this many milliseconds."
    )
    kernel_cache: Path | None = Field(
        default=None,
        description="Directory of the local executor's generated kernels and numba's machine "
        "code for them, shared by every process (default ~/.cache/streamdi/kernels; a temporary "
        "directory when that is not writable). Was STREAMDI_KERNEL_CACHE.",
    )

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _parse_bytes(cls, value: Any) -> Any:
        return parse_bytes(value)


class SparkSettings(BaseModel):
    """Spark (``SPARK__*``)."""

    master: str = Field(default="local[2]", description="Spark master URL: local[N] or spark://…")
    driver_memory: str = Field(default="2g", description="spark.driver.memory.")
    partitions: int | None = Field(
        default=None,
        ge=1,
        description="Tasks per pass of the spark executor. Unset: the cores of a local master, "
        "the default parallelism of a cluster.",
    )
    placement: Literal["auto", "driver", "spark", "supersteps"] = Field(
        default="auto",
        description="Where the spark executor runs compiled steps: auto (chosen per batch from "
        "its size, crossing transactions and measured costs), driver (always local), spark (at "
        "least one Spark pass per batch), supersteps (as many passes as allowed).",
    )
    min_transactions: int = Field(
        default=100_000,
        ge=0,
        description="Batches of a step with fewer transactions run on the driver (local) without "
        "asking Spark.",
    )
    max_supersteps: int = Field(
        default=8,
        ge=1,
        description="Most Spark passes of one batch; deeper crossing transactions run on the "
        "driver.",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="More Spark properties for the session, as JSON "
        '(`{"spark.executor.memory": "2g", "spark.eventLog.enabled": "true"}`); they win over '
        "streamdi's own.",
    )

    @field_validator("master")
    @classmethod
    def _check_master(cls, value: str) -> str:
        if not (value.startswith("local") or value.startswith("spark://")):
            raise ValueError("expected local, local[N], local[*] or spark://host:port")
        return value


class ApiSettings(BaseModel):
    """The REST service (``API__*``)."""

    host: str = Field(default="127.0.0.1", description="Bind address.")
    port: int = Field(default=8000, ge=1, le=65535, description="Bind port.")
    token: SecretStr | None = Field(
        default=None, description="Bearer token required by every endpoint when set."
    )
    max_body_mb: float = Field(
        default=64.0,
        gt=0,
        le=4096,
        description="Largest request body (MiB), counted while it is read; larger: 413.",
    )
    body_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Longest a request body may take to arrive once its route reads it; "
        "slower: 408.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Longest a client may take to send a request's line and headers, from "
        "connecting or from the previous answer; slower: the connection is closed.",
    )
    default_target: MigrationTarget | None = Field(
        default=None,
        description="Warehouse a query reads when it names none. Unset: the first of "
        "MIGRATION__TARGETS.",
    )
    query_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="Time limit of each statement of a query."
    )
    max_rows: int = Field(
        default=100_000, ge=1, description="Rows one answer keeps (more: the answer is truncated)."
    )
    max_union_rows: int = Field(
        default=5_000_000,
        ge=1,
        description="Rows an island query may pull from a warehouse into the service.",
    )
    page_size: int = Field(default=1_000, ge=1, description="Rows per page unless asked.")
    max_page_size: int = Field(default=10_000, ge=1, description="Most rows one page carries.")
    answer_ttl_s: float = Field(
        default=300.0, gt=0, description="How long an answer's pages stay available."
    )
    answer_cache_mb: int = Field(
        default=256, ge=1, description="Memory the kept answers may use (oldest dropped first)."
    )
    auto_crossover: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Plan auto migrates first below this staged fraction until it has timings "
        "of both plans on a target (S-Store measured the crossover near 25%).",
    )
    max_concurrent_queries: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Union queries that run at once; more wait their turn (a few cores serve a "
        "few queries well, and the pipeline keeps its share).",
    )
    push_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest wait for the collector to produce pushed events."
    )
    switch_interval_s: float = Field(
        default=0.001,
        gt=0,
        le=1,
        description="Python's thread switch interval in `streamdi serve`: the pipeline's threads "
        "keep the interpreter busy, and queries hand it back and forth between DuckDB calls, so "
        "a short interval keeps their latency down. Was STREAMDI_SWITCH_INTERVAL_S.",
    )
    sandbox_memory_limit: str = Field(
        default="1GB",
        description="DuckDB memory_limit of the in-memory island (all island queries together; "
        "it does not spill to disk: a query past it answers query_memory_exceeded).",
    )
    sandbox_threads: int = Field(
        default=2, ge=1, le=64, description="DuckDB threads of the in-memory island."
    )
    warehouse_memory_limit: str = Field(
        default="1GB",
        description="DuckDB memory_limit of the DuckDB warehouse's instance, which the migration "
        "and user queries share (sorts and joins past it spill to <warehouse>.tmp).",
    )
    warehouse_threads: int = Field(
        default=2, ge=1, le=64, description="DuckDB threads of the DuckDB warehouse's instance."
    )
    max_query_chars: int = Field(
        default=65_536, ge=16, le=1 << 20, description="Longest query text, in characters."
    )
    max_query_nodes: int = Field(
        default=10_000,
        ge=16,
        le=200_000,
        description="Most tokens, and most syntax nodes once parsed, of one query.",
    )
    max_query_depth: int = Field(
        default=24,
        ge=2,
        le=32,
        description="Deepest nesting of brackets, CASE and prefix operators in a query (its "
        "parsed tree may be 4x as deep); at most 32 so parsing never exhausts the stack.",
    )
    max_query_tables: int = Field(
        default=32,
        ge=1,
        le=256,
        description="Most table references of one query (joins, set operations and CTE "
        "references count): planning time grows with them and cannot be interrupted.",
    )
    max_query_selects: int = Field(
        default=32,
        ge=1,
        le=256,
        description="Most SELECT blocks of one query (union branches, subqueries and CTEs).",
    )
    max_answer_mb: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="Bytes (MiB, as Arrow) one answer may hold; past it the query answers "
        "answer_too_large. A PostgreSQL row may not be larger either.",
    )
    max_page_mb: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="Bytes (MiB, as Arrow) of rows one page carries; fewer rows than asked when "
        "they are wide (next_offset continues).",
    )
    max_union_mb: int = Field(
        default=256,
        ge=1,
        le=16384,
        description="Bytes (MiB, as Arrow) an island query may pull from a warehouse, all its "
        "tables together (besides API__MAX_UNION_ROWS per table).",
    )
    rss_limit_mb: int = Field(
        default=4096,
        ge=0,
        description="Memory backstop: while user queries run, the service's resident memory is "
        "sampled every API__RSS_SAMPLE_MS; past this many MiB every running user query is "
        "interrupted and answers query_memory_exceeded. 0: off.",
    )
    rss_sample_ms: int = Field(
        default=50, ge=5, le=5000, description="How often the memory backstop samples."
    )
    query_grace_s: float = Field(
        default=5.0,
        ge=0.5,
        le=600,
        description="How long past API__QUERY_TIMEOUT_S an interrupted statement may take to "
        "stop before the service abandons it (answers query_timeout and frees its slot).",
    )
    postgres_pool: int = Field(
        default=8, ge=1, le=256, description="PostgreSQL connections of the query service."
    )
    postgres_reader_dsn: SecretStr | None = Field(
        default=None,
        description="libpq DSN of the login role user queries run as on PostgreSQL: not a "
        "superuser, a member of no role, with SELECT on the warehouse's tables. Unset: streamdi "
        "creates and manages API__POSTGRES_READER_ROLE with a fresh password each start (needs a "
        "POSTGRES__DSN user that may create roles; the embedded server's may).",
    )
    postgres_reader_role: str = Field(
        default="streamdi_reader",
        min_length=1,
        max_length=63,
        pattern=r"^[a-z_][a-z0-9_]*$",
        description="Name of the LOGIN role streamdi creates for user queries when "
        "API__POSTGRES_READER_DSN is unset (NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
        "NOBYPASSRLS, read-only by default, SELECT on the warehouse only).",
    )
    postgres_reader_work_mem: str = Field(
        default="64MB",
        description="work_mem of the managed reader role (per sort or hash of a user query).",
    )
    postgres_reader_temp_file_limit: str = Field(
        default="1GB",
        description="temp_file_limit of the managed reader role (disk one user query may spill).",
    )

    @field_validator("default_target", "postgres_reader_dsn", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("token")
    @classmethod
    def _sendable_token(cls, value: SecretStr | None) -> SecretStr | None:
        # an empty token would match an empty "Bearer " header; other characters cannot travel
        # in a header as themselves, so no client could present them
        secret = value.get_secret_value() if value is not None else None
        if secret is not None and not (secret and all("!" <= c <= "~" for c in secret)):
            raise ValueError(
                "API__TOKEN must be visible ASCII characters without spaces (or unset for no auth)"
            )
        return value

    @field_validator("sandbox_memory_limit", "warehouse_memory_limit")
    @classmethod
    def _a_duckdb_size(cls, value: str) -> str:
        if not re.fullmatch(r"\s*\d+\s*([KMGT]i?B)\s*", value, flags=re.IGNORECASE):
            raise ValueError("expected a whole number with a unit, such as 1GB or 512MiB")
        return value.strip()

    @field_validator("postgres_reader_work_mem", "postgres_reader_temp_file_limit")
    @classmethod
    def _a_postgres_size(cls, value: str) -> str:
        if not re.fullmatch(r"\d+(kB|MB|GB|TB)", value.strip()):
            raise ValueError("expected a PostgreSQL size such as 64MB or 1GB (units kB MB GB TB)")
        return value.strip()


class TpcdiSettings(BaseModel):
    """The TPC-DI workload (``TPCDI__*``)."""

    digen_data: Path | None = Field(
        default=None,
        description="Real DIGen output for validation and benchmarks: an unpacked staging area "
        "(Batch1..Batch3), a directory holding a .tar.xz of one, or the archive itself. Unset: "
        "the repository's ../shared/tpcdi.",
    )
    cache_dir: Path = Field(
        default=Path(tempfile.gettempdir()) / "streamdi-tpcdi",
        description="Where an archived data set is unpacked, once.",
    )
    duckdb_memory_limit: str = Field(
        default="2GB",
        description="DuckDB memory_limit of the TPC-DI run's warehouse (and its in-memory "
        "dimension step); DuckDB's default is 80% of RAM.",
    )
    update_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Longest wait for an incremental update to reach every warehouse.",
    )
    malloc_arenas: int = Field(
        default=2,
        ge=0,
        le=64,
        description="glibc malloc arenas of a TPC-DI run's process (MALLOC_ARENA_MAX; 0: glibc's "
        "default, eight per core): each thread's arena keeps what was freed in it, and a run "
        "moves GBs through several threads (SF 10: 1,796 -> 1,040 MB after the historical load "
        "with two).",
    )


class StreamdiSettings(BaseSettings):
    """The whole settings tree. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_nested_delimiter="__",
        env_prefix="",
        case_sensitive=False,
        extra="ignore",
    )

    streamdi: ServiceSettings = Field(default_factory=ServiceSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    migration: MigrationSettings = Field(default_factory=MigrationSettings)
    staging: StagingSettings = Field(default_factory=StagingSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    tpcdi: TpcdiSettings = Field(default_factory=TpcdiSettings)

    @property
    def staging_path(self) -> Path:
        """The staging DuckDB file, defaulting under the state directory."""
        return self.staging.path or self.streamdi.state_dir / "staging.duckdb"

    @property
    def warehouse_path(self) -> Path:
        """The DuckDB warehouse file, defaulting under the state directory."""
        return self.migration.duckdb_path or self.streamdi.state_dir / "warehouse.duckdb"

    @property
    def postgres_data_dir(self) -> Path:
        """The embedded PostgreSQL data directory, defaulting under the state directory."""
        return self.postgres.data_dir or self.streamdi.state_dir / "postgres"


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}


def parse_bytes(value: Any) -> Any:
    """``"1GiB"``, ``"512MB"``, ``"1048576"`` as a number of bytes; empty as None; anything else
    unchanged (for the field's own validation)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
    if match is None or match.group(2).upper() not in _UNITS:
        raise ValueError("expected a size in bytes such as 1073741824, 1GiB or 512MB")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def _env_name(loc: tuple[int | str, ...]) -> str:
    return "__".join(str(part).upper() for part in loc)


def load_settings(**overrides: Any) -> StreamdiSettings:
    """Build the settings from the environment, with ``overrides`` taking precedence.

    ``overrides`` are section dicts: ``load_settings(engine={"executor": "serial"})``.
    Raises :class:`ConfigurationError` listing every bad setting by its environment name.
    """
    try:
        return StreamdiSettings(**overrides)
    except ValidationError as exc:
        raise ConfigurationError(validation_problems(exc)) from exc


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """``(environment name, what is expected (got ...))`` for each error of ``exc``; a secret's
    value is never repeated."""
    problems = []
    for err in exc.errors():
        expected = err["msg"]
        if expected.startswith("Value error, "):
            expected = expected[len("Value error, ") :]
        name = _env_name(err["loc"])
        given = err.get("input")
        if given is not None and not isinstance(given, dict):
            shown = "**********" if name in _secret_names() else repr(given)
            expected = f"{expected} (got {shown})"
        problems.append((name, expected))
    return problems


def _secret_names() -> set[str]:
    names = set()
    for section, field in StreamdiSettings.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            for name, inner in model.model_fields.items():
                if "SecretStr" in str(inner.annotation):
                    names.add(f"{section}__{name}".upper())
    return names


def masked_settings(settings: StreamdiSettings) -> dict[str, Any]:
    """The effective settings as plain data, secrets shown as ``'**********'``."""
    data: dict[str, Any] = settings.model_dump(mode="json")
    return data
