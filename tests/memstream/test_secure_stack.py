"""The secured stack (`memstream stack up --secure`): SASL/SCRAM and ACLs on a Kafka broker,
ACL users on Redis, attacked from every side.

The module starts a secured stack of its own in a temporary folder on free loopback ports
(the jars from the shared stack's cache), adds one user per role and grants them a log
through the command line, and stops the stack at the end. The shared stack is never touched.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from memstream import Memory, Message
from memstream.cli import main as memstream_main
from memstream.stack import StackConfig, StackPaths, down, up
from memstream.stack.probes import free_ports
from memstream.stack.secure import Credentials, load_admin, read_credentials, user_file
from producers.logs.kafka_client import (
    ENV_PASSWORD,
    ENV_USERNAME,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    client_conf,
)
from producers.logs.location import parse_kafka_location
from producers.logs.signing_key import init_key
from projector.service import Projector
from projector.snapshot_store import RedisAccessError, SnapshotStore
from schemas.audit import ERASED
from schemas.errors import AppendFailedError, MemstreamError

pytestmark = [pytest.mark.kafka, pytest.mark.secure]

REPO_ROOT = Path(__file__).resolve().parents[2]
LOG = "granted"
OTHER = "not-granted"


@dataclass(frozen=True)
class Secured:
    paths: StackPaths
    cfg: StackConfig
    bootstrap: str
    host: str
    redis_port: int
    admin: Credentials
    users: dict[str, Credentials]

    def redis_url(self, who: str | None) -> str:
        """`who`'s Redis URL (None: no credentials at all)."""
        if who is None:
            return f"redis://{self.host}:{self.redis_port}/0"
        creds = self.admin if who == "admin" else self.users[who]
        return creds.redis_url(self.host, self.redis_port)

    def location(self, log: str, who: str | None) -> str:
        return f"kafka://{self.bootstrap}/{log}?redis={self.redis_url(who)}"

    def secrets(self) -> list[str]:
        return [self.admin.password, *(c.password for c in self.users.values())]

    def length(self, topic: str) -> int:
        """The topic's end offset, asked as the admin."""
        conf = client_conf(
            self.bootstrap, username=self.admin.username, password=self.admin.password
        )
        consumer = Consumer({**conf, "group.id": "memstream-test-length"})
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), 15)[1])
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    stack_root = os.environ.get("MEMSTREAM_STACK_DIR")
    paths = StackPaths(
        tmp_path_factory.mktemp("secured"),
        cache=Path(stack_root) if stack_root else REPO_ROOT / ".stack",  # the jars, fetched once
    )
    ports = free_ports(3)
    cfg = StackConfig(
        kafka_port=ports[0],
        controller_port=ports[1],
        redis_port=ports[2],
        kafka_heap="512m",
        start_timeout=180.0,
        secure=True,
    )
    try:
        result = up(cfg, paths)
        stack = ["--stack-dir", str(paths.root)]
        users = {}
        for name, role in (("alice", "agent"), ("proj", "projector"), ("bob", "reader")):
            assert memstream_main(["stack", "users", "add", name, "--role", role, *stack]) == 0
            assert memstream_main(["acl", "grant", name, "--log", LOG, *stack]) == 0
            creds = read_credentials(user_file(paths.root, name))
            assert creds is not None
            users[name] = creds
        yield Secured(
            paths, cfg, result.bootstrap, cfg.host, cfg.redis_port, load_admin(paths.root), users
        )
    finally:
        down(paths, timeout=20.0)


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch, secured: Secured) -> Iterator[object]:
    """`as_user(name)` puts that user's Kafka credentials in the environment (None: none,
    a `Credentials`: those); restored after the test."""

    def use(who: str | Credentials | None) -> None:
        if who is None:
            monkeypatch.delenv(ENV_USERNAME, raising=False)
            monkeypatch.delenv(ENV_PASSWORD, raising=False)
            return
        if isinstance(who, str):
            who = secured.admin if who == "admin" else secured.users[who]
        monkeypatch.setenv(ENV_USERNAME, who.username)
        monkeypatch.setenv(ENV_PASSWORD, who.password)

    yield use


def message(text: str, actor: str = "alice") -> Message:
    return Message(session_id="s", actor=actor, speaker=actor, content=text)


def _no_secret(secured: Secured, *texts: str) -> None:
    for text in texts:
        for secret in secured.secrets():
            assert secret not in text


def test_secrets_are_private_files(secured: Secured) -> None:
    root = secured.paths.root / "secrets"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for path in [
        root / "admin.env",
        root / "users.acl",
        root / "roles.json",
        *(root / "users").iterdir(),
        secured.paths.kafka_config,  # it holds the admin's password (JAAS)
    ]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # Redis keeps hashes only; no plain password in its ACL file.
    _no_secret(secured, (root / "users.acl").read_text())
    props = secured.paths.kafka_config.read_text()
    assert "allow.everyone.if.no.acl.found=false" in props
    assert "StandardAuthorizer" in props
    assert f"listeners=SASL_PLAINTEXT://127.0.0.1:{secured.bootstrap.split(':')[1]}" in props


def test_granted_agent_appends_and_reader_reads(secured: Secured, as_user) -> None:
    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:
        stored = memory.add_message(message("hello"))
        assert stored.seq is not None
    as_user("bob")
    with Memory(secured.location(LOG, "bob"), create=False) as memory:
        assert any(e.id == stored.id for e in memory.replay().events)


def test_a_process_that_changes_its_credentials_asks_with_the_new_ones(
    secured: Secured, as_user
) -> None:
    """Look-ups share one admin client per cluster and credentials: one made before with
    other credentials (here none, which the SASL listener never lets in) is not the one
    asked for the log's end at a writer's first append."""
    from producers.logs.topic_identity import admin_for

    as_user(None)
    admin_for(secured.bootstrap)
    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:
        started = time.monotonic()
        stored = memory.add_message(message("asked as alice"))
        assert stored.seq is not None
        assert time.monotonic() - started < 5  # no wait on a client that cannot log in


def test_client_without_credentials_is_refused(
    secured: Secured, as_user, caplog: pytest.LogCaptureFixture
) -> None:
    as_user("alice")
    with Memory(secured.location(LOG, "alice")):
        pass  # the log exists
    before = secured.length(LOG)
    as_user(None)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(KafkaAuthenticationError) as raised:
        Memory(secured.location(LOG, "alice"))
    text = str(raised.value)
    assert f"log {LOG}" in text and "authentication failed" in text
    assert ENV_USERNAME in text and "requires SASL (SCRAM-SHA-512)" in text
    assert secured.length(LOG) == before
    _no_secret(secured, text, caplog.text)


def test_wrong_password_is_refused(
    secured: Secured, as_user, caplog: pytest.LogCaptureFixture
) -> None:
    before = secured.length(LOG)
    wrong = Credentials("alice", "not-" + secured.users["alice"].password)
    as_user(wrong)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(KafkaAuthenticationError) as raised:
        Memory(secured.location(LOG, "alice"))
    text = str(raised.value)
    assert f"log {LOG}" in text and "authentication failed" in text
    assert secured.length(LOG) == before
    _no_secret(secured, text, caplog.text, repr(raised.value))
    assert wrong.password not in text and wrong.password not in caplog.text


def test_agent_cannot_write_a_log_not_granted(
    secured: Secured, as_user, caplog: pytest.LogCaptureFixture
) -> None:
    as_user("admin")
    with Memory(secured.location(OTHER, "admin")) as memory:
        memory.add_message(message("the admin's", actor="admin"))
    before = secured.length(OTHER)
    as_user("alice")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(KafkaAuthorizationError) as raised:
        with Memory(secured.location(OTHER, "alice")) as memory:
            memory.add_message(message("forged into another log"))
    assert f"not authorized to write log {OTHER}" in str(raised.value)
    assert secured.length(OTHER) == before
    _no_secret(secured, str(raised.value), caplog.text)


@pytest.mark.parametrize("idle", [0.0, 2.0])
def test_reader_cannot_append(
    secured: Secured, as_user, caplog: pytest.LogCaptureFixture, idle: float
) -> None:
    """A reader's append is refused as not authorized, whether it comes at once or after
    its producer has already failed in the background (the broker refused it a producer
    id: `produce()` then says only "Local: Fatal error", and the cause is asked for)."""
    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:
        memory.add_message(message("so the log exists"))
    before = secured.length(LOG)
    as_user("bob")
    caplog.set_level(logging.DEBUG)
    with Memory(secured.location(LOG, "bob"), create=False) as memory:
        time.sleep(idle)
        attempt = message("a reader writing", actor="bob")
        with pytest.raises(AppendFailedError) as raised:
            memory.add_message(attempt)
    assert f"not authorized to write log {LOG}" in str(raised.value)
    assert raised.value.not_appended == (str(attempt.id),)  # certainly not written
    assert not raised.value.unknown
    assert secured.length(LOG) == before
    _no_secret(secured, str(raised.value), caplog.text)


def test_projector_principal_projects_and_reader_reads_its_snapshot(
    secured: Secured, as_user, tmp_path: Path
) -> None:
    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:
        memory.add_message(message("to project"))
    as_user("proj")
    key = tmp_path / "projector.key"
    init_key(key, "memstream.secure-test")
    projector = Projector(
        parse_kafka_location(secured.location(LOG, "proj")), key=key, checkpoint_ms=0
    )
    state = projector.run(until_caught_up=True, max_seconds=120)
    assert state.last_seq == secured.length(LOG) - 1
    # Its lifecycle events and signed checkpoints went to the topics it was granted (the
    # lifecycle's transactions commit on a thread of their own: waited for, bounded).
    for topic in (f"{LOG}.lifecycle", f"{LOG}.checkpoints"):
        deadline = time.monotonic() + 60
        while secured.length(topic) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert secured.length(topic) > 0, topic
    as_user("bob")
    loaded = SnapshotStore.connect(parse_kafka_location(secured.location(LOG, "bob"))).load()
    assert loaded is not None and loaded.last_seq == state.last_seq


def test_projector_without_redis_password_stops_with_a_clear_error(
    secured: Secured, as_user
) -> None:
    as_user("proj")
    projector = Projector(parse_kafka_location(secured.location(LOG, None)))
    with pytest.raises(RedisAccessError) as raised:
        projector.run(until_caught_up=True)
    assert f"log {LOG}" in str(raised.value) and "authentication failed" in str(raised.value)
    _no_secret(secured, str(raised.value))


def test_redis_refuses_clients_without_a_password(secured: Secured) -> None:
    client = redis.Redis.from_url(secured.redis_url(None), socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        client.get(f"memstream:{LOG}:pos")
    client.close()


@pytest.mark.parametrize("who", ["bob", "alice"])
def test_only_the_projector_writes_snapshot_keys(secured: Secured, who: str) -> None:
    key = f"memstream:{LOG}:pos"
    admin = redis.Redis.from_url(secured.redis_url("admin"))
    before = admin.get(key)
    client = redis.Redis.from_url(secured.redis_url(who))
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set(key, b"forged")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.delete(key)
    # Nor another log's keys, even to read.
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get(f"memstream:{OTHER}:pos")
    assert admin.get(key) == before
    projector = redis.Redis.from_url(secured.redis_url("proj"))
    projector.set(f"memstream:{LOG}:probe", b"1")  # the projector's user may
    projector.delete(f"memstream:{LOG}:probe")
    for c in (admin, client, projector):
        c.close()


def test_cli_says_what_is_wrong_without_secrets(
    secured: Secured, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = ["--stack-dir", str(secured.paths.root)]
    assert memstream_main(["acl", "grant", "nobody", "--log", LOG, *stack]) == 1
    assert "no user nobody" in capsys.readouterr().err
    assert memstream_main(["acl", "grant", "alice", "--log", "bad/name", *stack]) == 1
    assert "not a valid topic name" in capsys.readouterr().err
    assert memstream_main(["stack", "users", "add", "carol", "--role", "agent", *stack]) == 0
    out = capsys.readouterr().out
    carol = read_credentials(user_file(secured.paths.root, "carol"))
    assert carol is not None and carol.password not in out
    assert memstream_main(["stack", "users", "add", "carol", "--role", "reader", *stack]) == 1
    assert "role agent" in capsys.readouterr().err


def test_errors_and_reprs_hide_redis_passwords(secured: Secured, as_user) -> None:
    as_user("alice")
    location = secured.location(LOG, "alice")
    password = secured.users["alice"].password
    with Memory(location) as memory:
        assert password not in repr(memory)
    parsed = parse_kafka_location(location)
    assert password not in repr(parsed) and password not in parsed.shown
    assert str(parsed) == location  # the location itself, to hand on
    with pytest.raises(MemstreamError) as raised:
        parse_kafka_location(location + "&bogus=1")
    assert password not in str(raised.value) and "alice:***@" in str(raised.value)


def test_a_restart_keeps_users_and_grants(secured: Secured, as_user) -> None:
    again = up(secured.cfg, secured.paths)  # already up: health-checked as the admin
    assert again.started == ()
    down(secured.paths, timeout=20.0)
    restarted = up(secured.cfg, secured.paths)
    assert set(restarted.started) == {"kafka", "redis"}
    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:  # SCRAM and ACLs kept by KRaft
        memory.add_message(message("after a restart"))
    client = redis.Redis.from_url(secured.redis_url("bob"))  # the ACL file kept by Redis
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set(f"memstream:{LOG}:pos", b"forged")
    client.close()


def test_queryd_serves_a_log_as_its_reader(secured: Secured, as_user) -> None:
    from fastapi.testclient import TestClient

    from queryd.daemon import DaemonSettings, create_app

    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:
        stored = memory.add_message(message("for the reader"))
    as_user("bob")
    settings = DaemonSettings(min_seq_timeout=5.0, poll_interval=0.01, probe_interval=0.2)
    app = create_app([secured.location(LOG, "bob")], settings)
    with TestClient(app, base_url="http://localhost") as client:
        assert app.state.daemon.registry.wait_ready(60), "the log did not hydrate"
        answer = client.get(f"/logs/{LOG}/state", params={"min_seq": stored.seq})
        assert answer.status_code == 200, answer.text


def test_an_encrypted_log_on_the_secured_stack(secured: Secured, as_user) -> None:
    """Agents seal and erase (the key store LOG.keys, the erasure lock in Redis), readers
    read plaintext, the projector folds the receipt without ever reading a key."""
    log_name = "private-orders"
    stack = ["--stack-dir", str(secured.paths.root)]
    for name in ("alice", "proj", "bob"):
        assert memstream_main(["acl", "grant", name, "--log", log_name, *stack]) == 0
    as_user("alice")
    with Memory(secured.location(log_name, "alice"), encrypt=True) as memory:
        card = memory.add_message(message("card 4111 1111"))
        other = memory.add_message(
            Message(session_id="t", actor="alice", speaker="alice", content="kept")
        )
        erasure = memory.erase("s", "request")
        assert erasure.erased == (card.id,)
    as_user("bob")
    with Memory(secured.location(log_name, "bob"), create=False) as reader:
        assert reader.get(card.id).content == ERASED  # type: ignore[union-attr]
        assert reader.get(other.id).content == "kept"  # type: ignore[union-attr]
    as_user("proj")
    state = Projector(parse_kafka_location(secured.location(log_name, "proj"))).run(
        until_caught_up=True, max_seconds=120
    )
    assert list(state.rejections) == []
    assert state.memory.erasure_of(card.id) is not None


def test_a_projector_group_member_sets_its_groups_session_as_the_projector(
    secured: Secured, as_user, caplog: pytest.LogCaptureFixture
) -> None:
    """A projector principal may set its group's session (KIP-848: a group config on the
    broker); an agent principal may not alter a group's configs."""
    import threading

    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    from projector.group import ProjectorGroup

    as_user("alice")
    with Memory(secured.location(LOG, "alice")) as memory:
        memory.add_message(message("for the group"))
    as_user("proj")
    group = ProjectorGroup(
        [secured.location(LOG, "proj")],
        group="memstream-secure-group",
        session_timeout_ms=4_500,
        heartbeat_ms=450,
        projector={"every_ms": 30, "key": False},
    )
    halt = threading.Event()
    caplog.set_level(logging.WARNING, logger="memstream.projector.group")
    runner = threading.Thread(target=group.run, args=(halt,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 90
        while group.owned() != [LOG] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group.owned() == [LOG]
    finally:
        halt.set()
        runner.join(60)
    assert not runner.is_alive()
    assert not [r for r in caplog.records if "refused its session" in r.message]
    conf = client_conf(
        secured.bootstrap, username=secured.admin.username, password=secured.admin.password
    )
    admin = AdminClient(conf)
    [future] = admin.describe_configs(
        [ConfigResource(ResourceType.GROUP, "memstream-secure-group")]
    ).values()
    settings = {name: entry.value for name, entry in future.result(timeout=30).items()}
    assert settings["consumer.session.timeout.ms"] == "4500"
    # An agent may not: the same change as alice is refused by the broker.
    as_user("alice")
    agent = AdminClient(
        client_conf(
            secured.bootstrap,
            username=secured.users["alice"].username,
            password=secured.users["alice"].password,
        )
    )
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = ConfigResource(
        ResourceType.GROUP,
        "memstream-secure-group",
        incremental_configs=[
            ConfigEntry(
                "consumer.session.timeout.ms", "9000", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    [refused] = agent.incremental_alter_configs([resource]).values()
    with pytest.raises(KafkaException, match="(?i)authori"):
        refused.result(timeout=30)
