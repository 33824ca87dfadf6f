"""The secured stack's secrets and config: SASL/SCRAM and ACLs for Kafka, ACL users for Redis.

`memstream stack up --secure` keeps everything secret in ``.stack/secrets/`` (mode 0700):

- ``admin.env`` (0600): the admin's Kafka SCRAM password and Redis password, as the
  ``MEMSTREAM_KAFKA_USERNAME`` / ``MEMSTREAM_KAFKA_PASSWORD`` / ``REDIS_URL`` lines a shell
  can source; made once, at the first secured start, and kept.
- ``users.acl`` (0600): Redis's ACL file (passwords only as SHA-256 hashes), written by Redis
  itself on ``ACL SAVE`` after each user added, so users survive a restart.
- ``users/NAME.env`` (0600): each user's credentials, written by `stack users add`.

The broker listens with SASL_PLAINTEXT (SCRAM-SHA-512) on loopback, Kafka's
``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false`` and the admin as the one
super user. Its KRaft controller listener takes SASL/PLAIN with the admin's password (SCRAM
credentials live in the metadata log, which the controller quorum needs before it can read
them), also on loopback only. The admin's SCRAM credential is written at ``kafka-storage
format`` time (``--add-scram``); later users' with the admin client.

Passwords never appear in a command line shown to anyone, a log line or an error: the only
command line holding one is the storage format's (a short-lived child of `stack up`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

ADMIN = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
# Kafka user names and Redis user names both: letters, digits and a few safe marks.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def check_name(name: str) -> str:
    """`name` if it is a usable principal name, else ValueError naming it."""
    if not name or len(name) > 64 or not set(name) <= _NAME_CHARS or name.startswith("-"):
        raise ValueError(
            f"user name {name!r}: expected 1-64 letters, digits, '.', '_' or '-' "
            "(not starting with '-')"
        )
    return name


def new_password() -> str:
    """A random password: 32 URL-safe characters, nothing a config file needs escaped."""
    return secrets.token_urlsafe(24)


def secrets_dir(root: Path) -> Path:
    return root / "secrets"


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` created with mode 0600 (never readable by others, even briefly)."""
    _private_dir(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Credentials:
    """One principal's password for Kafka (SCRAM) and Redis (ACL user): the same name and
    password on both. Its repr hides the password."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"

    def redis_url(self, host: str, port: int, db: int = 0) -> str:
        user, password = quote(self.username, safe=""), quote(self.password, safe="")
        return f"redis://{user}:{password}@{host}:{port}/{db}"

    def env_lines(self, bootstrap: str, redis_url: str) -> str:
        """Shell lines to source: the variables every memstream client reads."""
        return (
            f"export KAFKA_BOOTSTRAP_SERVERS={shlex.quote(bootstrap)}\n"
            f"export MEMSTREAM_KAFKA_USERNAME={shlex.quote(self.username)}\n"
            f"export MEMSTREAM_KAFKA_PASSWORD={shlex.quote(self.password)}\n"
            f"export REDIS_URL={shlex.quote(redis_url)}\n"
        )


def _parse_env(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("export "):
            name, sep, value = line[len("export ") :].partition("=")
            if sep:
                parts = shlex.split(value)
                out[name.strip()] = parts[0] if parts else ""
    return out


def read_credentials(path: Path) -> Credentials | None:
    """The credentials kept in an ``*.env`` file of the secrets folder, None if absent."""
    try:
        env = _parse_env(path.read_text())
    except FileNotFoundError:
        return None
    username = env.get("MEMSTREAM_KAFKA_USERNAME")
    password = env.get("MEMSTREAM_KAFKA_PASSWORD")
    if not username or not password:
        return None
    return Credentials(username, password)


def admin_file(root: Path) -> Path:
    return secrets_dir(root) / "admin.env"


def user_file(root: Path, name: str) -> Path:
    return secrets_dir(root) / "users" / f"{check_name(name)}.env"


def acl_file(root: Path) -> Path:
    return secrets_dir(root) / "users.acl"


def ensure_admin(root: Path, bootstrap: str, host: str, redis_port: int) -> Credentials:
    """The admin's credentials, made on the first secured start and kept after (the broker's
    metadata holds its SCRAM credential from the storage format on)."""
    path = admin_file(root)
    kept = read_credentials(path)
    if kept is not None:
        creds = kept
    else:
        creds = Credentials(ADMIN, new_password())
    write_private(path, creds.env_lines(bootstrap, creds.redis_url(host, redis_port)))
    return creds


def load_admin(root: Path) -> Credentials:
    creds = read_credentials(admin_file(root))
    if creds is None:
        raise FileNotFoundError(
            f"{admin_file(root)}: no admin credentials (the stack was not started with --secure)"
        )
    return creds


def scram_argument(creds: Credentials) -> str:
    """``kafka-storage format --add-scram`` takes the credential in this form."""
    fields = f"name={creds.username},password={creds.password},iterations={SCRAM_ITERATIONS}"
    return f"{SCRAM_MECHANISM}=[{fields}]"


def _jaas(module: str, fields: dict[str, str]) -> str:
    inner = " ".join(f'{k}="{v}"' for k, v in fields.items())
    return f"{module} required {inner};"


def server_properties(admin: Credentials) -> dict[str, str]:
    """What a secured broker adds to (and overrides in) the plain stack's server.properties;
    the listeners themselves are named in `config.render_server_properties`."""
    scram = _jaas(
        "org.apache.kafka.common.security.scram.ScramLoginModule",
        {"username": admin.username, "password": admin.password},
    )
    plain = _jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        {
            "username": admin.username,
            "password": admin.password,
            f"user_{admin.username}": admin.password,
        },
    )
    return {
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{admin.username}",
        "allow.everyone.if.no.acl.found": "false",
    }


def redis_acl_text(admin: Credentials) -> str:
    """Redis's first ACL file: `default` off (no anonymous access), the admin on with every
    command and key. Passwords are kept hashed (``#`` + SHA-256), as Redis's own ACL SAVE
    writes them."""
    digest = hashlib.sha256(admin.password.encode()).hexdigest()
    return f"user default off resetkeys -@all\nuser {admin.username} on #{digest} ~* &* +@all\n"
