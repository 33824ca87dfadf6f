"""Issue 11, items 7, 8 and 11 against real broker faults: an outage while appending, an
unreachable broker, a producer that hits a fatal error.

These faults stop or misconfigure the broker, so they run against a private one-node KRaft
broker this module starts (own data dir, own loopback ports, the stack's jars) and stops
whatever happens; the shared broker is never touched.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from memstream.stack import kafka as stack_kafka
from memstream.stack.config import StackConfig
from memstream.stack.paths import StackPaths
from memstream.stack.probes import free_port
from memstream.stack.procs import ProcessRecord, spawn, terminate
from producers.logs.base import Appended
from producers.logs.kafka import READ_TIMEOUT_ENV, KafkaLog
from producers.logs.kafka_client import client_conf
from producers.logs.location import KafkaLocation, parse_kafka_location
from producers.logs.shared_producer import PRODUCERS
from producers.memory import Memory
from schemas.audit import Message
from schemas.codec import decode_record
from schemas.errors import AppendFailedError, AppendOutcomeUnknownError, LogUnavailableError

pytestmark = pytest.mark.kafka

REPO_ROOT = Path(__file__).resolve().parents[2]
APPEND_TIMEOUT = 4.0
READ_TIMEOUT = 3.0


@dataclass
class PrivateBroker:
    cfg: StackConfig
    record: ProcessRecord

    @property
    def bootstrap(self) -> str:
        return self.cfg.bootstrap

    def pause(self) -> None:
        os.kill(self.record.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.record.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    """A one-node KRaft broker of this module's own, with an authorizer (every principal
    is allowed everything until a test adds ACLs)."""
    stack_root = os.environ.get("MEMSTREAM_STACK_DIR")
    paths = StackPaths(
        tmp_path_factory.mktemp("private-kafka"),
        cache=Path(stack_root) if stack_root else REPO_ROOT / ".stack",  # the jars, fetched once
    )
    cfg = StackConfig(
        kafka_port=free_port(),
        controller_port=free_port(),
        redis_port=free_port(),
        kafka_heap="384m",
        start_timeout=60.0,
    )
    stack_kafka.ensure_dist(paths, cfg.kafka_version)
    stack_kafka.write_config(paths, cfg)
    with paths.kafka_config.open("a") as config:
        config.write(
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
            "allow.everyone.if.no.acl.found=true\n"
        )
    stack_kafka.format_storage(paths, cfg)
    argv = stack_kafka._java_argv(paths, cfg, stack_kafka.MAIN_CLASS, str(paths.kafka_config))
    record = spawn(argv, paths.kafka_log, marker=str(paths.kafka_config), cwd=paths.kafka_home)
    broker = PrivateBroker(cfg, record)
    try:
        stack_kafka.wait_ready(paths, cfg, record)
        yield broker
    finally:
        try:
            broker.resume()  # a stopped process does not act on SIGTERM
        except ProcessLookupError:
            pass
        terminate(record, timeout=15.0)


def _location(bootstrap: str, redis_url: str, topic: str) -> KafkaLocation:
    return parse_kafka_location(f"kafka://{bootstrap}/{topic}?redis={redis_url}")


def _open(location: KafkaLocation, **kwargs: object) -> KafkaLog:
    return KafkaLog(
        location,
        hydrate=False,
        append_timeout=APPEND_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        **kwargs,  # type: ignore[arg-type]
    )


def _message(text: str) -> Message:
    return Message(speaker="ana", content=text, session_id="s1")


def _ids_in_log(location: KafkaLocation) -> list[str]:
    reader = _open(location, create=False)
    try:
        return [str(decode_record(data).id) for _, data in reader.records(0, timeout=2.0)]
    finally:
        reader.close()


def _first(appended: list[Appended]) -> Appended:
    return appended[0]


def _sort_failure(
    id_: str, error: BaseException | None, not_appended: set[str], unknown: set[str]
) -> None:
    """File a failed record under what its error says became of it."""
    assert isinstance(error, AppendFailedError), error
    if id_ in error.unknown:
        assert isinstance(error, AppendOutcomeUnknownError)
        assert "outcome unknown" in str(error)
        unknown.add(id_)
    else:
        assert id_ in error.not_appended and "not appended" in str(error), error
        not_appended.add(id_)


def _append_once_recovered(
    log: KafkaLog, text: str, not_appended: set[str], unknown: set[str]
) -> Appended:
    """Append after a fault is lifted; attempts made while the broker is still coming
    back fail cleanly and are filed like any other failure."""
    deadline = time.monotonic() + 20.0
    while True:
        message = _message(text)
        try:
            return log.append([message])[0]
        except AppendFailedError as error:
            _sort_failure(str(message.id), error, not_appended, unknown)
            if time.monotonic() > deadline:
                raise


def test_a_failed_append_never_lands_later(
    private_broker: PrivateBroker, redis_url: str, unique_name: str
) -> None:
    """Item 8: the broker stops answering (SIGSTOP) while appends are in flight and queued.
    Every append fails within its timeout saying which records were not appended and which
    have an unknown outcome; after the broker resumes, the log holds what was acknowledged,
    none of the "not appended" records, no duplicate, and appends work again. The log gave
    up on the producer that held them (dropping what it had in flight too, so that it
    never renumbers and sends again what it may have written: no duplicates) and appends
    with a new one."""
    location = _location(private_broker.bootstrap, redis_url, unique_name)
    log = _open(location)
    try:
        acknowledged = [
            str(a.record.id) for a in log.append([_message(f"ok{i}") for i in range(5)])
        ]  # type: ignore[union-attr]
        given_up = log._producer
        futures: list[tuple[str, Future[Appended]]] = []
        private_broker.pause()
        try:
            # A few small requests get sent (librdkafka keeps up to 5 in flight), the rest
            # stay queued in this process.
            for i in range(8):
                message = _message(f"early{i}")
                futures.append((str(message.id), log.submit([message], _first)))
                time.sleep(0.05)
            for i in range(300):
                message = _message(f"queued{i}")
                futures.append((str(message.id), log.submit([message], _first)))
            late = _message("late")
            started = time.monotonic()
            with pytest.raises(AppendFailedError) as refused:
                log.append([late])
            elapsed = time.monotonic() - started
            outcomes = [
                (id_, future.exception(timeout=APPEND_TIMEOUT + 5)) for id_, future in futures
            ]
        finally:
            private_broker.resume()
        assert elapsed < APPEND_TIMEOUT + 2
        assert str(late.id) in str(refused.value)
        assert f"log {unique_name}" in str(refused.value)

        not_appended: set[str] = set()
        unknown: set[str] = set()
        for id_, error in outcomes:
            _sort_failure(id_, error, not_appended, unknown)
        assert unknown and not_appended  # both kinds happened, each told apart
        assert any("given up while the records were in flight" in str(e) for _, e in outcomes)

        # Appends work again, with no record reported failed landing later.
        after = _append_once_recovered(log, "after", not_appended, unknown)
        assert given_up is not None and log._producer is not given_up
        assert after.seq >= 5
        time.sleep(APPEND_TIMEOUT)  # anything librdkafka still held would be sent by now
        in_log = _ids_in_log(location)
        assert len(in_log) == len(set(in_log))  # no duplicate
        assert in_log[:5] == acknowledged and in_log[-1] == str(after.record.id)  # type: ignore[union-attr]
        assert not set(in_log) & not_appended
        assert set(in_log) <= {*acknowledged, *unknown, str(after.record.id)}  # type: ignore[union-attr]
    finally:
        log.close()


def test_a_logs_producer_cannot_renumber_records_it_may_have_written(
    kafka_bootstrap: str, redis_url: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings that keep librdkafka's idempotent producer from bumping its epoch over
    records it may have written (which the broker would then write again): its message
    timeout lies past the append's deadline (the log gives the producer up before), and
    one produce request is in flight at a time (no later request to be refused as out of
    order during a leader change)."""
    seen: list[dict[str, object]] = []
    acquire = PRODUCERS.acquire

    def spy(conf: dict[str, object], listener: Callable[[KafkaError], None]) -> Producer:
        seen.append(conf)
        return acquire(conf, listener)

    monkeypatch.setattr(PRODUCERS, "acquire", spy)
    log = _open(_location(kafka_bootstrap, redis_url, unique_name))
    try:
        assert log.append([_message("one")])[0].seq == 0
    finally:
        log.close()
    assert seen, "the log made no producer"
    conf = seen[-1]
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert conf["max.in.flight.requests.per.connection"] == 1
    assert int(str(conf["message.timeout.ms"])) > APPEND_TIMEOUT * 1000


def test_an_unreachable_broker_is_log_unavailable_in_bounded_time(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 11: nothing listens at the location's broker: opening the log, as a writer or
    a reader, fails within the read timeout naming the log, the broker and the cause."""
    port = free_port()
    location = _location(f"127.0.0.1:{port}", redis_url, f"t-nowhere-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv(READ_TIMEOUT_ENV, str(READ_TIMEOUT))  # for Memory, which takes none
    for create in (True, False):
        for opening in (_open, Memory):
            started = time.monotonic()
            with pytest.raises(LogUnavailableError) as unavailable:
                opening(location if opening is _open else str(location), create=create)  # type: ignore[operator]
            assert time.monotonic() - started < READ_TIMEOUT + 3
            text = str(unavailable.value)
            assert f"log {location.topic}" in text and f"127.0.0.1:{port}" in text


def test_a_paused_broker_fails_reads_and_opening_in_bounded_time(
    private_broker: PrivateBroker, redis_url: str, unique_name: str
) -> None:
    """Item 3's bound and item 11: a broker that accepts connections but never answers."""
    location = _location(private_broker.bootstrap, redis_url, unique_name)
    writer = _open(location)
    writer.append([_message("one")])
    reader = _open(location, create=False)
    try:
        private_broker.pause()
        try:
            for attempt in (lambda: reader.state(), lambda: _open(location, create=False)):
                started = time.monotonic()
                with pytest.raises(LogUnavailableError, match=f"log {unique_name}"):
                    attempt()
                assert time.monotonic() - started < READ_TIMEOUT * 2 + 2
        finally:
            private_broker.resume()
        deadline = time.monotonic() + 20.0
        while True:  # and reads work again once the broker is back
            try:
                assert len(reader.state().memory.messages) == 1
                break
            except LogUnavailableError:
                if time.monotonic() > deadline:
                    raise
    finally:
        reader.close()
        writer.close()


def _filter(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _wait_for_acls(
    admin: AdminClient, *, present: Sequence[AclBinding] = (), absent: Sequence[AclBinding] = ()
) -> None:
    """Until the broker's authorizer shows the ACLs created (or no longer the deleted):
    they reach it through the metadata log, a moment after the call returns."""
    deadline = time.monotonic() + 20.0
    while True:
        shown = [admin.describe_acls(_filter(b)).result(10) for b in (*present, *absent)]
        if all(shown[: len(present)]) and not any(shown[len(present) :]):
            return
        assert time.monotonic() < deadline, "the broker never showed the ACL change"
        time.sleep(0.1)


def _acl(
    resource: ResourceType, name: str, operation: AclOperation, permission: AclPermissionType
) -> AclBinding:
    return AclBinding(
        resource, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", operation, permission
    )


def test_a_fatal_producer_error_does_not_wedge_the_log(
    private_broker: PrivateBroker, redis_url: str, unique_name: str
) -> None:
    """Item 7: a producer that hits a fatal error (the idempotent producer may not get a
    producer id: idempotent writes are denied by an ACL) fails the appends of its time with
    a clear error, and once the ACL is lifted the next append goes through (a new
    producer), instead of every call failing for good."""
    admin = AdminClient(client_conf(private_broker.bootstrap))
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    allowed = [
        _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALL, allow),
        _acl(ResourceType.TOPIC, "*", AclOperation.ALL, allow),
        _acl(ResourceType.GROUP, "*", AclOperation.ALL, allow),
    ]
    denied = [
        _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE, deny),
        _acl(ResourceType.TOPIC, "*", AclOperation.WRITE, deny),
    ]
    for future in admin.create_acls(allowed + denied).values():
        future.result(10)
    location = _location(private_broker.bootstrap, redis_url, unique_name)
    log = None
    try:
        _wait_for_acls(admin, present=denied)
        log = _open(location)
        for _ in range(2):  # each attempt fails cleanly, in bounded time
            started = time.monotonic()
            with pytest.raises(AppendFailedError, match=f"append to log {unique_name} failed"):
                log.append([_message("denied")])
            assert time.monotonic() - started < APPEND_TIMEOUT + 2
        for future in admin.delete_acls([_filter(b) for b in denied]).values():
            future.result(10)
        _wait_for_acls(admin, absent=denied)
        not_appended: set[str] = set()
        unknown: set[str] = set()
        stored = _append_once_recovered(log, "allowed again", not_appended, unknown)
        assert stored.record.content == "allowed again"  # type: ignore[union-attr]
        in_log = _ids_in_log(location)
        assert in_log[-1] == str(stored.record.id)  # type: ignore[union-attr]
        assert set(in_log) <= {*unknown, str(stored.record.id)}  # type: ignore[union-attr]
    finally:
        if log is not None:
            log.close()
        for future in admin.delete_acls(
            [
                AclBindingFilter(
                    ResourceType.ANY,
                    None,
                    ResourcePatternType.ANY,
                    None,
                    None,
                    AclOperation.ANY,
                    AclPermissionType.ANY,
                )
            ]
        ).values():
            future.result(10)
