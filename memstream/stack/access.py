"""Users and grants on a secured stack: SCRAM credentials and ACLs through Kafka's own admin
API, ACL users in Redis.

A user has one role, fixed when it is added (`add_user`), and is granted logs one by one
(`grant`). What each role may do with a granted log LOG:

========== ==================================================== ===============================
role       Kafka (ACLs, all ALLOW, literal names)               Redis (keys ``memstream:LOG:*``)
========== ==================================================== ===============================
agent      LOG: write, read, describe, describe configs, create read; and write
           LOG.lifecycle: create (a writer makes it), read      ``memstream:LOG:erasure:*``
           LOG.lifecycle/.checkpoints/.memex: read, describe    (the erasure lock)
           LOG.keys (the key store): read, write, create,
           describe, describe configs
projector  LOG: read, describe, describe configs                read and write, transactions,
           LOG.lifecycle/.checkpoints/.memex: read, write,      scripts (its lease)
           create, describe, describe and alter configs
           LOG.keys: describe (it folds content sealed)
           transactional id memstream-projector.LOG: write
reader     LOG and its derived topics, LOG.keys: read,          read
           describe, describe configs
========== ==================================================== ===============================

Every role also reads the consumer groups named ``memstream-*`` (memstream's readers take a
random group id and never commit; the grant only lets librdkafka ask); a projector may
also describe and alter those groups' configs (a projector group sets its session).
Nothing else is allowed: the broker runs with ``allow.everyone.if.no.acl.found=false``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

import memstream.stack.secure as secure
from memstream.stack.errors import StackError
from memstream.stack.manager import _read_state, _running
from memstream.stack.paths import StackPaths
from producers.keys.kafka_keys import KEYS_SUFFIX
from producers.logs.kafka_client import client_conf, error_cause

log = logging.getLogger(__name__)

ROLES = ("agent", "projector", "reader")
DERIVED_SUFFIXES = (".lifecycle", ".checkpoints", ".memex")
GROUP_PREFIX = "memstream-"
_TIMEOUT = 30.0

_READ = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
_REDIS_ROLE_COMMANDS = {
    # The projector writes snapshots in MULTI/EXEC under WATCH, and renews its lease in Lua.
    "projector": ["+@read", "+@write", "+@transaction", "+@scripting", "+@connection"],
    # An agent's erase takes the log's erasure lock (SET NX, DEL), on its own keys only.
    "agent": ["+@read", "+@connection", "+set", "+del"],
    "reader": ["+@read", "+@connection"],
}


@dataclass(frozen=True)
class SecuredStack:
    """What the admin needs to reach a running secured stack."""

    bootstrap: str
    host: str
    redis_port: int
    admin: secure.Credentials

    def kafka_admin(self) -> AdminClient:
        return AdminClient(
            client_conf(self.bootstrap, username=self.admin.username, password=self.admin.password)
        )

    def redis_admin(self) -> redis.Redis:
        url = self.admin.redis_url(self.host, self.redis_port)
        return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)


def secured_stack(paths: StackPaths) -> SecuredStack:
    """The running secured stack in `paths`; StackError when it is not up or not secured."""
    state = _read_state(paths)
    kafka, red = state.get("kafka"), state.get("redis")
    if not (_running(kafka) and _running(red)) or kafka is None or red is None:
        raise StackError(f"the stack in {paths.root} is not up (`memstream stack up --secure`)")
    if not (kafka.get("secure") and red.get("secure")):
        raise StackError(
            f"the stack in {paths.root} is not secured: users and grants need "
            "`memstream stack up --secure` (after `memstream stack down`)"
        )
    address = str(red["address"]).removeprefix("redis://").split("/")[0]
    host, _, port = address.rpartition(":")
    return SecuredStack(str(kafka["address"]), host, int(port), secure.load_admin(paths.root))


def _roles_file(paths: StackPaths) -> Path:
    return secure.secrets_dir(paths.root) / "roles.json"


def roles(paths: StackPaths) -> dict[str, str]:
    """Each user added so far and its role."""
    try:
        data = json.loads(_roles_file(paths).read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise StackError(f"{_roles_file(paths)} is not a JSON object of user: role")
    return {str(k): str(v) for k, v in data.items() if v in ROLES}


def add_user(paths: StackPaths, name: str, role: str) -> Path:
    """Add user `name` with `role` (a new random password, on both Kafka and Redis), or give
    an existing one a new password. Returns the file holding its credentials (mode 0600)."""
    secure.check_name(name)
    if role not in ROLES:
        raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    if name == secure.ADMIN or name == "default":
        raise ValueError(f"user name {name!r} is reserved")
    stack = secured_stack(paths)
    known = roles(paths)
    if name in known and known[name] != role:
        raise StackError(f"user {name} exists with role {known[name]}, not {role}")
    creds = secure.Credentials(name, secure.new_password())
    upsert = UserScramCredentialUpsertion(
        name,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, secure.SCRAM_ITERATIONS),
        creds.password.encode(),
    )
    try:
        admin = stack.kafka_admin()  # kept while its futures run
        futures = admin.alter_user_scram_credentials([upsert], request_timeout=_TIMEOUT)
        for future in futures.values():
            future.result(timeout=_TIMEOUT)
    except (KafkaException, TimeoutError) as exc:
        raise StackError(f"cannot add Kafka user {name}: {error_cause(exc)}") from None
    rules = ["on", "resetpass", f">{creds.password}", *_REDIS_ROLE_COMMANDS[role]]
    client = stack.redis_admin()
    try:
        client.execute_command("ACL", "SETUSER", name, *rules)
        client.execute_command("ACL", "SAVE")
        os.chmod(secure.acl_file(paths.root), 0o600)  # Redis rewrites it 0644
    except redis.RedisError as exc:
        # redis-py's message never holds the command's arguments (the password).
        raise StackError(f"cannot add Redis user {name}: {exc}") from None
    finally:
        client.close()
    known[name] = role
    secure.write_private(_roles_file(paths), json.dumps(known, indent=2, sort_keys=True) + "\n")
    path = secure.user_file(paths.root, name)
    secure.write_private(
        path, creds.env_lines(stack.bootstrap, creds.redis_url(stack.host, stack.redis_port))
    )
    log.info("user %s (%s) added", name, role)
    return path


def _topic(name: str, principal: str, ops: Iterable[AclOperation]) -> list[AclBinding]:
    return [
        AclBinding(
            ResourceType.TOPIC,
            name,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in ops
    ]


def bindings(name: str, role: str, log_name: str) -> list[AclBinding]:
    """The ACLs that grant `log_name` to user `name` of `role` (see the module's table)."""
    principal = f"User:{name}"
    derived = [log_name + suffix for suffix in DERIVED_SUFFIXES]
    out: list[AclBinding] = []
    if role == "agent":
        out += _topic(log_name, principal, (*_READ, AclOperation.WRITE, AclOperation.CREATE))
        out += _topic(log_name + ".lifecycle", principal, (AclOperation.CREATE,))
        for topic in derived:
            out += _topic(topic, principal, _READ)
        out += _topic(
            log_name + KEYS_SUFFIX, principal, (*_READ, AclOperation.WRITE, AclOperation.CREATE)
        )
    elif role == "projector":
        out += _topic(log_name, principal, _READ)
        for topic in derived:
            out += _topic(
                topic,
                principal,
                (*_READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.ALTER_CONFIGS),
            )
        out += _topic(log_name + KEYS_SUFFIX, principal, (AclOperation.DESCRIBE,))
        out += [
            AclBinding(
                ResourceType.TRANSACTIONAL_ID,
                f"memstream-projector.{log_name}",
                ResourcePatternType.LITERAL,
                principal,
                "*",
                op,
                AclPermissionType.ALLOW,
            )
            for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
        ]
    elif role == "reader":
        for topic in (log_name, *derived, log_name + KEYS_SUFFIX):
            out += _topic(topic, principal, _READ)
    else:
        raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    group_ops = [AclOperation.READ, AclOperation.DESCRIBE]
    if role == "projector":
        # A projector group member sets its group's session on the broker (KIP-848:
        # `projector.group`); without the grant it is warned and the broker's is used.
        group_ops += [AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS]
    out += [
        AclBinding(
            ResourceType.GROUP,
            GROUP_PREFIX,
            ResourcePatternType.PREFIXED,
            principal,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in group_ops
    ]
    return out


def redis_keys(role: str, log_name: str) -> list[str]:
    """The Redis key pattern rule granting `log_name`'s snapshot keys to a user of `role`."""
    pattern = f"memstream:{log_name}:*"
    if role == "projector":
        return [f"~{pattern}"]
    if role == "agent":
        return [f"%R~{pattern}", f"~memstream:{log_name}:erasure:*"]
    return [f"%R~{pattern}"]


def grant(paths: StackPaths, name: str, log_name: str) -> tuple[str, list[AclBinding]]:
    """Grant log `log_name` to user `name` as its role allows. Returns the role and the ACLs
    made (creating an ACL that exists already is a no-op on the broker)."""
    from producers.logs.location import check_topic_name

    check_topic_name(log_name)
    stack = secured_stack(paths)
    role = roles(paths).get(name)
    if role is None:
        raise StackError(
            f"no user {name} in this stack (`memstream stack users add {name} --role ROLE`)"
        )
    acls = bindings(name, role, log_name)
    try:
        admin = stack.kafka_admin()  # kept while its futures run
        futures = admin.create_acls(acls, request_timeout=_TIMEOUT)
        for future in futures.values():
            future.result(timeout=_TIMEOUT)
    except (KafkaException, TimeoutError) as exc:
        raise StackError(f"cannot grant log {log_name} to {name}: {error_cause(exc)}") from None
    client = stack.redis_admin()
    try:
        client.execute_command("ACL", "SETUSER", name, *redis_keys(role, log_name))
        client.execute_command("ACL", "SAVE")
        os.chmod(secure.acl_file(paths.root), 0o600)  # Redis rewrites it 0644
    except redis.RedisError as exc:
        raise StackError(f"cannot grant log {log_name}'s Redis keys to {name}: {exc}") from None
    finally:
        client.close()
    log.info("granted log %s to %s (%s)", log_name, name, role)
    return role, acls


def describe(binding: AclBinding) -> str:
    """One ACL in words, e.g. ``User:alice may WRITE topic orders``."""
    kind: Any = binding.restype
    operation: Any = binding.operation
    pattern = " (prefix)" if binding.resource_pattern_type == ResourcePatternType.PREFIXED else ""
    return f"{binding.principal} may {operation.name} {kind.name.lower()} {binding.name}{pattern}"
