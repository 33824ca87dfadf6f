"""Credentials in locations and client settings (pure: no server): where they come from,
and that nothing shown ever holds a password."""

from __future__ import annotations

import pytest

from memstream.stack.config import StackConfig, render_redis_conf, render_server_properties
from memstream.stack.secure import Credentials, redis_acl_text, server_properties
from producers.logs.kafka_client import ENV_PASSWORD, ENV_USERNAME, client_conf
from producers.logs.location import parse_kafka_location, redact
from schemas.errors import LocationError

SECRET = "s3cret-Pa55"


def test_redact_hides_every_password() -> None:
    text = f"kafka://h:1/log?redis=redis://proj:{SECRET}@h:2/0 and rediss://u:{SECRET}@x:3"
    shown = redact(text)
    assert SECRET not in shown
    assert "redis://proj:***@h:2/0" in shown and "rediss://u:***@x:3" in shown
    assert redact("kafka://h:1/log?redis=redis://h:2/0") == "kafka://h:1/log?redis=redis://h:2/0"


def test_location_keeps_the_password_but_never_shows_it() -> None:
    text = f"kafka://h:1/log?redis=redis://proj:{SECRET}@h:2/0"
    loc = parse_kafka_location(text)
    assert loc.redis_url == f"redis://proj:{SECRET}@h:2/0" and str(loc) == text
    assert SECRET not in repr(loc) and SECRET not in loc.shown


@pytest.mark.parametrize(
    "bad",
    [
        f"kafka://h:1/bad name?redis=redis://u:{SECRET}@h:2/0",
        f"kafka://h:1/log?redis=redis://u:{SECRET}@h:2/0&nope=1",
        f"kafka://h:1/log?redis=redis://u:{SECRET}@h:2/0&replication=x",
    ],
)
def test_location_errors_hide_the_password(bad: str) -> None:
    with pytest.raises(LocationError) as raised:
        parse_kafka_location(bad)
    assert SECRET not in str(raised.value) and "u:***@" in str(raised.value)


def test_kafka_credentials_are_refused_in_the_location() -> None:
    with pytest.raises(LocationError) as raised:
        parse_kafka_location(f"kafka://alice:{SECRET}@h:1/log?redis=redis://h:2/0")
    assert SECRET not in str(raised.value)
    assert ENV_USERNAME in str(raised.value) and ENV_PASSWORD in str(raised.value)


def test_client_conf_takes_credentials_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    assert "sasl.username" not in client_conf("h:1")  # unsecured, as before
    monkeypatch.setenv(ENV_USERNAME, "alice")
    with pytest.raises(ValueError) as raised:
        client_conf("h:1")
    assert ENV_PASSWORD in str(raised.value)
    monkeypatch.setenv(ENV_PASSWORD, SECRET)
    conf = client_conf("h:1")
    assert conf["security.protocol"] == "SASL_PLAINTEXT"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (conf["sasl.username"], conf["sasl.password"]) == ("alice", SECRET)
    # Given ones win over the environment (the stack's own admin client).
    assert client_conf("h:1", username="admin", password="x")["sasl.username"] == "admin"


def test_credentials_repr_hides_the_password() -> None:
    assert SECRET not in repr(Credentials("alice", SECRET))


def test_secured_config_renders_sasl_and_acls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = StackConfig(secure=True)
    props = render_server_properties(cfg, tmp_path, server_properties(Credentials("admin", SECRET)))
    lines = dict(line.split("=", 1) for line in props.splitlines() if "=" in line)
    assert lines["listeners"] == "SASL_PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert lines["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:19092"
    assert lines["authorizer.class.name"].endswith("StandardAuthorizer")
    assert lines["allow.everyone.if.no.acl.found"] == "false"
    assert lines["super.users"] == "User:admin"
    assert lines["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    plain = render_server_properties(StackConfig(), tmp_path)
    assert "SASL" not in plain and "authorizer" not in plain  # the default stays open
    conf = render_redis_conf(cfg, tmp_path, tmp_path / "pid", tmp_path / "users.acl")
    assert f'aclfile "{tmp_path / "users.acl"}"' in conf
    acl = redis_acl_text(Credentials("admin", SECRET))
    assert "user default off" in acl and SECRET not in acl


def test_secure_setting_from_the_environment() -> None:
    assert StackConfig.from_env({"MEMSTREAM_STACK_SECURE": "1"}).secure
    assert not StackConfig.from_env({}).secure
    with pytest.raises(ValueError):
        StackConfig.from_env({"MEMSTREAM_STACK_SECURE": "maybe"})
    with pytest.raises(ValueError) as raised:
        StackConfig.from_env({}, secure=True, brokers=3)
    assert "one Kafka node" in str(raised.value)
