"""The embedded broker: Apache Kafka as a real child process whose log lives in the state
directory. Its records survive a restart of the broker and of streamdi; a broker left running by
a killed streamdi is adopted (same process) by the next one; a broker that does not answer is
replaced on the same log; a second process on the same state directory shares it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingest.broker import EmbeddedKafka, client_config, ensure_topics, pid_alive, stop_left_running
from ingest.class_archive import build_class_archive
from ingest.exceptions import BrokerStartFailed
from streamdi.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[3]
KAFKA = KafkaSettings()

#: A child process that starts (or joins) the state directory's broker, says so, then waits.
CHILD = """
import json, sys, time
from pathlib import Path
from ingest.broker import EmbeddedKafka
broker = EmbeddedKafka(Path(sys.argv[1]))
broker.start()
print(json.dumps({"pid": broker.pid, "owned": broker.owned}), flush=True)
if sys.argv[2] == "stop":
    broker.stop()
else:
    time.sleep(600)
"""


def _child(state: Path, then: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state), then],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the child exited with {process.wait()}"
    said: dict[str, object] = json.loads(line)
    return process, said


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    ensure_topics(KAFKA, bootstrap, {topic: 1})
    producer = KafkaProducer(**client_config(KAFKA, bootstrap), acks="all")
    for value in values:
        producer.send(topic, value)
    producer.flush()
    producer.close()


def _read(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_config(KAFKA, bootstrap), enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    end = consumer.end_offsets([tp])[tp]
    out: list[bytes] = []
    while len(out) < end:
        for records in consumer.poll(timeout_ms=1000).values():
            out.extend(r.value for r in records)
    consumer.close()
    return out


def _record(state: Path) -> dict[str, int]:
    data: dict[str, int] = json.loads((state / "kafka" / "broker.json").read_text())
    return data


def _command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def test_records_survive_a_restart_on_the_same_log_and_port(tmp_path: Path) -> None:
    # the class archive `make test` saved (`streamdi broker --fetch-only`; made now if missing)
    archive = build_class_archive(KAFKA)
    assert archive is not None and archive.is_file()
    broker = EmbeddedKafka(tmp_path, KAFKA)
    first = broker.start()
    assert first.embedded and first.log_id.startswith("kafka:")
    assert broker.pid is not None
    assert f"-XX:SharedArchiveFile={archive}" in _command_line(broker.pid)
    _produce(first.bootstrap_servers, "kept", [b"a", b"b", b"c"])
    jvm = broker.pid
    assert jvm is not None
    broker.stop()
    assert not pid_alive(jvm)
    assert _record(tmp_path)["pid"] == 0  # nothing runs; the ports are kept

    again = EmbeddedKafka(tmp_path, KAFKA)
    second = again.start()
    try:
        assert second == first  # same port, same cluster id: staged offsets stay valid
        assert _read(second.bootstrap_servers, "kept") == [b"a", b"b", b"c"]
        assert (tmp_path / "kafka" / "log" / "meta.properties").is_file()
        assert "Kafka Server started" in (tmp_path / "kafka" / "broker.log").read_text()
        # the JVM mapped the archive without a word (it warns in broker.out when it cannot)
        assert "cds" not in (tmp_path / "kafka" / "broker.out").read_text().lower()
    finally:
        again.stop()


def test_a_broker_left_by_a_killed_owner_is_adopted_and_stopped(tmp_path: Path) -> None:
    owner, said = _child(tmp_path, "wait")
    assert said["owned"] is True
    jvm = int(str(said["pid"]))
    _produce(f"127.0.0.1:{_record(tmp_path)['port']}", "t", [b"x"])
    owner.kill()  # kill -9: the broker lives on as an orphan
    owner.wait()
    assert pid_alive(jvm)

    heir = EmbeddedKafka(tmp_path, KAFKA)
    heir.start()
    try:
        assert heir.pid == jvm and heir.owned  # the same process, not a second broker
        assert _read(heir.bootstrap_servers, "t") == [b"x"]
        assert _record(tmp_path)["owner"] == os.getpid()
    finally:
        heir.stop()
    assert not pid_alive(jvm)


def test_a_second_process_shares_the_broker_and_leaves_it_running(tmp_path: Path) -> None:
    broker = EmbeddedKafka(tmp_path, KAFKA)
    broker.start()
    try:
        guest, said = _child(tmp_path, "stop")
        assert guest.wait(60) == 0
        assert said == {"pid": broker.pid, "owned": False}
        assert broker.alive()  # the guest's stop left it alone
        assert stop_left_running(tmp_path) is False  # its owner (this process) lives
    finally:
        broker.stop()


def test_a_broker_that_does_not_answer_is_replaced_on_the_same_log(tmp_path: Path) -> None:
    owner, said = _child(tmp_path, "wait")
    jvm = int(str(said["pid"]))
    port = _record(tmp_path)["port"]
    _produce(f"127.0.0.1:{port}", "t", [b"kept"])
    owner.kill()
    owner.wait()
    os.kill(jvm, signal.SIGSTOP)  # alive, but answers nothing
    try:
        # given 2 s to answer (KAFKA__EMBEDDED_REUSE_TIMEOUT_S; 10 s by default)
        broker = EmbeddedKafka(tmp_path, KafkaSettings(embedded_reuse_timeout_s=2))
        started = time.monotonic()
        broker.start()
        try:
            assert broker.pid != jvm and not pid_alive(jvm)
            assert 2 <= time.monotonic() - started < 120
            assert _read(broker.bootstrap_servers, "t") == [b"kept"]
        finally:
            broker.stop()
    finally:
        if pid_alive(jvm):
            os.kill(jvm, signal.SIGKILL)


def test_an_orphan_is_stopped_by_stop_left_running(tmp_path: Path) -> None:
    owner, said = _child(tmp_path, "wait")
    owner.kill()
    owner.wait()
    assert stop_left_running(tmp_path) is True
    assert not pid_alive(int(str(said["pid"])))
    assert stop_left_running(tmp_path) is False


def test_without_java_the_start_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no java here
    with pytest.raises(BrokerStartFailed, match="needs Java 17") as caught:
        EmbeddedKafka(tmp_path, KAFKA).start()
    assert "KAFKA__BOOTSTRAP_SERVERS" in str(caught.value)
