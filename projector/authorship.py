"""Provable authorship: who may sign a log's records, at which seq, and what a signature binds.

A log is *signed* when its first record (seq 0) is a ``memstream.log.signed`` envelope,
signed by one of the admin keys it names (their signed-note verifier keys,
``NAME+KEYID+BASE64``). The admins are fixed by that record; an admin's key can be
replaced (``memstream.admin.rotate``: the admin's name and its new verifier key, signed by
an admin with the key it holds then), so a lost or retired admin key is retired in the
log's history, and what it signs after is refused. Admins enrol agents
(``memstream.agent.enrol``: the agent's name, its verifier key, what it may append) and
revoke them (``memstream.agent.revoke``) with records in the log, so which key was valid at
seq N is part of the log's history (`Authorship.history`). A log whose first record is
anything else is *unsigned*: it folds as it always did, and refuses signed records and
enrolments (it has no admins to check them against).

On a signed log the fold (`projector.record_fold`) checks every record at its seq, before
anything else, and a record that fails becomes a rejection with the reason, never state:

- it must be signed (`schemas.signing`) by an admin or an enrolled, unrevoked agent, with
  the key that name holds at that seq, for this log (the log id in the signed text);
- it must not replay a record already in the log (an audit event's id, an envelope's id);
- its kind must be one the agent may append (admins may append anything);
- enrolments and revocations must be signed by an admin;
- **bound fields**: an audit event's ``actor`` is its signer, exactly. Fields naming a
  person (a message's ``speaker``, ``requested_by``, and every ``actor``, ``speaker``,
  ``requested_by`` or ``author`` field inside an envelope's payload, at any depth) may name
  the signer, or someone who is NOT an identity of this log (no admin, no agent ever
  enrolled): a human the agent quotes. Naming another admin or agent is forgery. So a human
  speaker quoted by an agent is recorded as ``speaker="ana", actor=<the agent>``: the log
  proves which agent wrote that ana said it, never that ana did.

Pure: no I/O. Checking a signature is Ed25519 (`cryptography`), as the checkpoints are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pyrsistent import PMap, PSet, PVector, pmap, pset, pvector

from schemas.audit import BaseEvent, Deletion, Erasure, Message
from schemas.codec import record_kind
from schemas.errors import MemstreamError
from schemas.evidence.note import NoteError, NoteVerifier
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope, Record
from schemas.signing import SIGNED_MAGIC, SignedRecord, signed_text, split_signed

__all__ = [
    "AuthorshipError",
    "Agent",
    "Authorship",
    "KINDS",
    "LOG_SIGNED",
    "AGENT_ENROL",
    "AGENT_REVOKE",
    "ADMIN_ROTATE",
    "AUTHORSHIP_TYPES",
    "BOUND_FIELDS",
    "is_authorship_record",
    "verify_signature",
    "preverify",
    "authorize",
    "signed_log_record",
    "enrol_record",
    "revoke_record",
    "rotate_admin_record",
]

LOG_SIGNED = "memstream.log.signed"
AGENT_ENROL = "memstream.agent.enrol"
AGENT_REVOKE = "memstream.agent.revoke"
ADMIN_ROTATE = "memstream.admin.rotate"
AUTHORSHIP_TYPES = frozenset({LOG_SIGNED, AGENT_ENROL, AGENT_REVOKE, ADMIN_ROTATE})
# What an agent may be allowed to append: the audit kinds, and graph envelopes.
KINDS: tuple[str, ...] = ("message", "document", "recall", "deletion", "erasure", "graph")
# Fields naming a person, checked at any depth of an envelope's payload.
BOUND_FIELDS = frozenset({"actor", "speaker", "requested_by", "author"})
_MAX_ADMINS = 16
_MAX_WALK = 10_000  # values looked at in one payload (it is bounded by the codec's depth)


class AuthorshipError(MemstreamError, ValueError):
    """A record a signed log refuses: unsigned, badly signed, by a revoked or unknown key,
    replayed, beyond what its signer may do, or naming someone else as its author."""


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent's enrolment: its key, what it may append, when enrolled and revoked."""

    name: str
    verifier: NoteVerifier
    may: frozenset[str]
    enrolled_seq: int
    revoked_seq: int | None = None


@dataclass(frozen=True)
class Authorship:
    """The enrolment state of a signed log at a seq.

    `history` lists ``(seq, action, name, verifier key text)`` for the log's creation (one
    entry per admin), each enrolment and each revocation, in log order.
    """

    log_id: str
    admins: PMap[str, NoteVerifier]
    agents: PMap[str, Agent] = field(default_factory=pmap)
    history: PVector[tuple[int, str, str, str]] = field(default_factory=pvector)
    envelope_ids: PSet[str] = field(default_factory=pset)

    def identities(self) -> set[str]:
        return set(self.admins) | set(self.agents)

    def key_at(self, name: str) -> NoteVerifier | None:
        admin = self.admins.get(name)
        if admin is not None:
            return admin
        agent = self.agents.get(name)
        return None if agent is None else agent.verifier


# Public key objects by raw key: building one costs more than a third of a verification.
_PUBLIC_KEYS: dict[bytes, Ed25519PublicKey] = {}


def _public_key(raw: bytes) -> Ed25519PublicKey:
    key = _PUBLIC_KEYS.get(raw)
    if key is None:
        if len(_PUBLIC_KEYS) > 4096:
            _PUBLIC_KEYS.clear()
        key = _PUBLIC_KEYS[raw] = Ed25519PublicKey.from_public_bytes(raw)
    return key


# Signatures found valid ahead of the fold (`preverify`), each consumed by its check: a
# cache of a pure function, keyed by everything it reads (key, signature, signed text).
_PREVERIFIED: set[bytes] = set()
_MAX_PREVERIFIED = 1 << 16


_text = signed_text  # the note text a record's signature covers (`schemas.signing`)


def _check(public_key: bytes, signature: bytes, text: bytes) -> bool:
    try:
        _public_key(public_key).verify(signature, text)
    except InvalidSignature:
        return False
    return True


def _verifies(verifier: NoteVerifier, log_id: str, signed: SignedRecord) -> bool:
    if signed.key_id != verifier.key_id:
        return False
    text = _text(log_id, signed.inner)
    if _PREVERIFIED:
        key = verifier.public_key + signed.signature + text
        if key in _PREVERIFIED:
            _PREVERIFIED.discard(key)
            return True
    return _check(verifier.public_key, signed.signature, text)


def preverify(
    auth: Authorship | None,
    records: Sequence[bytes],
    map_: Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]] = map,
) -> int:
    """Check the signatures of `records` (a batch about to be folded) ahead of the fold,
    with `map_` (e.g. a thread pool's `map`: the checks release the GIL), against the keys
    their signers hold in `auth`; the fold then finds the valid ones done. Changes no
    result: a record is still judged by the fold at its seq. Returns how many verified."""
    if auth is None:
        return 0
    jobs: list[tuple[bytes, bytes, bytes]] = []
    for data in records:
        if data[:2] != SIGNED_MAGIC:
            continue
        try:
            signed = split_signed(data)
        except MemstreamError:
            continue
        verifier = auth.key_at(signed.signer)
        if verifier is None or signed.key_id != verifier.key_id:
            continue
        jobs.append((verifier.public_key, signed.signature, _text(auth.log_id, signed.inner)))
    if not jobs:
        return 0
    if len(_PREVERIFIED) + len(jobs) > _MAX_PREVERIFIED:
        _PREVERIFIED.clear()
    chunk = max(1, len(jobs) // 8)
    parts = [jobs[i : i + chunk] for i in range(0, len(jobs), chunk)]

    def run(part: list[tuple[bytes, bytes, bytes]]) -> list[bytes]:
        return [pub + sig + text for pub, sig, text in part if _check(pub, sig, text)]

    done = 0
    for valid in map_(run, parts):
        _PREVERIFIED.update(valid)
        done += len(valid)
    return done


def is_authorship_record(record: Record) -> bool:
    return (
        isinstance(record, GraphEnvelope)
        and record.namespace == OPERATION_NAMESPACE
        and record.type in AUTHORSHIP_TYPES
    )


def _payload(record: GraphEnvelope) -> Mapping[str, Any]:
    if not isinstance(record.payload, Mapping):
        raise AuthorshipError(f"{record.type} {record.id}: payload must be an object")
    return record.payload


def _verifier(text: Any, what: str) -> NoteVerifier:
    if not isinstance(text, str):
        raise AuthorshipError(f"{what}: a verifier key NAME+KEYID+BASE64KEY, got {text!r:.80}")
    try:
        return NoteVerifier.parse(text)
    except NoteError as exc:
        raise AuthorshipError(f"{what}: {exc}") from None


def _admins_of(record: GraphEnvelope) -> dict[str, NoteVerifier]:
    admins = _payload(record).get("admins")
    if not isinstance(admins, list) or not 1 <= len(admins) <= _MAX_ADMINS:
        raise AuthorshipError(
            f"{LOG_SIGNED} {record.id}: 'admins' must list 1 to {_MAX_ADMINS} verifier keys"
        )
    out: dict[str, NoteVerifier] = {}
    for i, text in enumerate(admins):
        verifier = _verifier(text, f"{LOG_SIGNED} {record.id}: admins[{i}]")
        if verifier.name in out:
            raise AuthorshipError(f"{LOG_SIGNED} {record.id}: admin {verifier.name!r} twice")
        out[verifier.name] = verifier
    return out


def verify_signature(
    auth: Authorship | None, seq: int, signed: SignedRecord, record: Record | None
) -> str:
    """The name whose valid signature `signed` carries at `seq`; `AuthorshipError` otherwise.

    With no authorship yet (an unsigned log, or seq 0), only the record that makes a log
    signed is checked: against the admins it names itself, under its own id.
    """
    name = signed.signer
    if auth is None:
        if not (seq == 0 and isinstance(record, GraphEnvelope) and record.type == LOG_SIGNED):
            # (`record`: the decoded record; needed only here, for its admins)
            raise AuthorshipError(
                f"a record signed by {name!r} on a log that does not require signatures "
                "(created without them): there is no admin key to check it against"
            )
        admin = _admins_of(record).get(name)
        if admin is None:
            raise AuthorshipError(
                f"{LOG_SIGNED} {record.id}: signed by {name!r}, who is not one of its admins"
            )
        if not _verifies(admin, record.id, signed):
            raise AuthorshipError(
                f"{LOG_SIGNED} {record.id}: the signature of {name!r} does not verify"
            )
        return name
    verifier = auth.admins.get(name)
    if verifier is None:
        agent = auth.agents.get(name)
        if agent is None:
            raise AuthorshipError(f"signed by {name!r}, who is not enrolled on this log")
        if agent.revoked_seq is not None:
            raise AuthorshipError(
                f"signed by {name!r}, whose key was revoked at seq {agent.revoked_seq}"
            )
        verifier = agent.verifier
    if signed.key_id != verifier.key_id:
        raise AuthorshipError(
            f"signed by {name!r} with key {signed.key_id.hex()}, not the key "
            f"{verifier.key_id.hex()} it holds on this log"
        )
    if not _verifies(verifier, auth.log_id, signed):
        raise AuthorshipError(
            f"the signature of {name!r} does not verify: the record was altered after it "
            "was signed, or was signed for another log"
        )
    return name


def _kind(record: Record) -> str:
    kind = record_kind(record)
    return "graph" if kind == "envelope" else kind


def _walk_names(value: Any, found: list[tuple[str, Any]]) -> None:
    """(field, value) of every bound field in a JSON value, iteratively and bounded."""
    stack = [value]
    seen = 0
    while stack:
        current = stack.pop()
        seen += 1
        if seen > _MAX_WALK:
            raise AuthorshipError(f"a payload of over {_MAX_WALK} values is not checked")
        if isinstance(current, Mapping):
            for key, item in current.items():
                if key in BOUND_FIELDS:
                    found.append((key, item))
                if isinstance(item, Mapping | list | tuple):
                    stack.append(item)
        elif isinstance(current, list | tuple):
            stack.extend(v for v in current if isinstance(v, Mapping | list | tuple))


def _check_bound(auth: Authorship, signer: str, record: Record) -> None:
    # Per record, on the fold's path: no set of every identity, no message built unless
    # the check fails.
    if isinstance(record, BaseEvent):
        if record.actor != signer:
            raise AuthorshipError(
                f"{_kind(record)} {record.id}: actor {record.actor!r} is not its signer "
                f"{signer!r} (a signed record's actor is the key that signed it)"
            )
        names: list[tuple[str, Any]] = []
        if isinstance(record, Message):
            names.append(("speaker", record.speaker))
        if isinstance(record, Deletion | Erasure):
            names.append(("requested_by", record.requested_by))
    else:
        names = []
        _walk_names(record.payload, names)
    for name, value in names:
        if (
            isinstance(value, str)
            and value != signer
            and (value in auth.admins or value in auth.agents)
        ):
            raise AuthorshipError(
                f"{_kind(record)} {record.id}: {name} {value!r} names another identity of "
                f"this log, not its signer {signer!r}"
            )


def _may(kinds: Any, record: GraphEnvelope) -> frozenset[str]:
    if kinds is None:
        return frozenset(KINDS)
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise AuthorshipError(f"{AGENT_ENROL} {record.id}: 'may' must list kinds of {KINDS}")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise AuthorshipError(
            f"{AGENT_ENROL} {record.id}: 'may' names {unknown[0]!r}, not one of {KINDS}"
        )
    return frozenset(kinds)


def _rotate_admin(auth: Authorship, seq: int, record: GraphEnvelope) -> Authorship:
    """An admin's key replaced (the record is signed by an admin: checked by the caller)."""
    payload = _payload(record)
    name = payload.get("admin")
    if not isinstance(name, str) or name not in auth.admins:
        raise AuthorshipError(f"{ADMIN_ROTATE} {record.id}: 'admin' must name an admin of this log")
    verifier = _verifier(payload.get("key"), f"{ADMIN_ROTATE} {record.id}: key")
    if verifier.name != name:
        raise AuthorshipError(
            f"{ADMIN_ROTATE} {record.id}: the key is named {verifier.name!r}, not {name!r}"
        )
    if verifier.key_id == auth.admins[name].key_id:
        raise AuthorshipError(f"{ADMIN_ROTATE} {record.id}: {name!r} holds this key already")
    return Authorship(
        auth.log_id,
        auth.admins.set(name, verifier),
        auth.agents,
        auth.history.append((seq, "rotate", name, verifier.text())),
        auth.envelope_ids,
    )


def _apply_admin(auth: Authorship, seq: int, record: GraphEnvelope, signer: str) -> Authorship:
    if signer not in auth.admins:
        raise AuthorshipError(
            f"{record.type} {record.id}: signed by {signer!r}, who is not an admin of this "
            "log (only its admins enrol and revoke agents, and rotate admin keys)"
        )
    if record.type == ADMIN_ROTATE:
        return _rotate_admin(auth, seq, record)
    payload = _payload(record)
    name = payload.get("agent")
    if not isinstance(name, str) or not name:
        raise AuthorshipError(f"{record.type} {record.id}: 'agent' must name the agent")
    if name in auth.admins:
        raise AuthorshipError(f"{record.type} {record.id}: {name!r} is an admin of this log")
    current = auth.agents.get(name)
    if record.type == AGENT_ENROL:
        verifier = _verifier(payload.get("key"), f"{AGENT_ENROL} {record.id}: key")
        if verifier.name != name:
            raise AuthorshipError(
                f"{AGENT_ENROL} {record.id}: the key is named {verifier.name!r}, not {name!r}"
            )
        if current is not None and current.revoked_seq is None:
            raise AuthorshipError(
                f"{AGENT_ENROL} {record.id}: {name!r} is enrolled already (since seq "
                f"{current.enrolled_seq}); revoke it first"
            )
        agent = Agent(name, verifier, _may(payload.get("may"), record), seq)
        entry = (seq, "enrol", name, verifier.text())
    else:
        if current is None or current.revoked_seq is not None:
            raise AuthorshipError(f"{AGENT_REVOKE} {record.id}: {name!r} is not enrolled")
        agent = Agent(current.name, current.verifier, current.may, current.enrolled_seq, seq)
        entry = (seq, "revoke", name, current.verifier.text())
    return Authorship(
        auth.log_id,
        auth.admins,
        auth.agents.set(name, agent),
        auth.history.append(entry),
        auth.envelope_ids,
    )


def authorize(
    auth: Authorship | None,
    seq: int,
    record: Record,
    signer: str | None,
    known: Mapping[Any, Any] | Any,
) -> Authorship | None:
    """The authorship state after `record` at `seq`, signed (verified) by `signer` or not;
    `AuthorshipError` naming why a signed log refuses it. `known` answers ``get(id)`` for
    the audit events already in the log (the memory state), to refuse replays.

    On an unsigned log (`auth` None) everything but the records of authorship passes
    unchanged; the first record may make the log signed.
    """
    authorship = is_authorship_record(record)
    if auth is None:
        if not authorship:
            if signer is not None:  # verify_signature refuses this first
                raise AuthorshipError("a signed record on a log that does not require them")
            return None
        assert isinstance(record, GraphEnvelope)
        if record.type != LOG_SIGNED:
            raise AuthorshipError(
                f"{record.type} {record.id}: this log does not require signatures (created "
                "without them), so it has no admins and no enrolments"
            )
        if seq != 0:
            raise AuthorshipError(
                f"{LOG_SIGNED} {record.id}: only a log's first record (seq 0) can make it "
                f"signed; this is seq {seq}"
            )
        admins = _admins_of(record)
        if signer is None or signer not in admins:
            raise AuthorshipError(f"{LOG_SIGNED} {record.id}: must be signed by an admin")
        history = pvector((seq, "admin", name, v.text()) for name, v in admins.items())
        return Authorship(record.id, pmap(admins), pmap(), history, pset())
    if signer is None:
        raise AuthorshipError(
            f"{_kind(record)} {record.id}: not signed, on a log that requires signatures"
        )
    if isinstance(record, BaseEvent):
        found = known.get(record.id)
        if found is not None:
            raise AuthorshipError(
                f"{record.kind} {record.id}: replayed: this event is in the log already "
                f"(seq {getattr(found, 'seq', '?')})"
            )
    elif record.id in auth.envelope_ids:
        raise AuthorshipError(
            f"envelope {record.id}: replayed: this envelope is in the log already"
        )
    if authorship:
        assert isinstance(record, GraphEnvelope)
        if record.type == LOG_SIGNED:
            raise AuthorshipError(
                f"{LOG_SIGNED} {record.id}: the log is signed already (since seq 0); its "
                "admins are fixed"
            )
        auth = _apply_admin(auth, seq, record, signer)
    elif signer not in auth.admins:
        agent = auth.agents[signer]  # verified: enrolled and not revoked
        kind = _kind(record)
        if kind not in agent.may:
            raise AuthorshipError(
                f"{kind} {record.id}: {signer!r} may append {sorted(agent.may)}, not {kind}"
            )
    _check_bound(auth, signer, record)
    if isinstance(record, GraphEnvelope):
        auth = Authorship(
            auth.log_id, auth.admins, auth.agents, auth.history, auth.envelope_ids.add(record.id)
        )
    return auth


def _envelope(type_: str, payload: dict[str, Any], id_: str, ts: str) -> GraphEnvelope:
    return GraphEnvelope(id=id_, namespace=OPERATION_NAMESPACE, type=type_, ts=ts, payload=payload)


def signed_log_record(admins: list[NoteVerifier], id_: str, ts: str) -> GraphEnvelope:
    """The first record of a signed log (its id is the log id)."""
    return _envelope(LOG_SIGNED, {"admins": [a.text() for a in admins]}, id_, ts)


def enrol_record(agent: NoteVerifier, may: list[str] | None, id_: str, ts: str) -> GraphEnvelope:
    payload: dict[str, Any] = {"agent": agent.name, "key": agent.text()}
    if may is not None:
        payload["may"] = list(may)
    return _envelope(AGENT_ENROL, payload, id_, ts)


def revoke_record(name: str, reason: str, id_: str, ts: str) -> GraphEnvelope:
    return _envelope(AGENT_REVOKE, {"agent": name, "reason": reason}, id_, ts)


def rotate_admin_record(new_key: NoteVerifier, id_: str, ts: str) -> GraphEnvelope:
    """Replace the key of the admin `new_key` names with `new_key` (signed by an admin)."""
    return _envelope(ADMIN_ROTATE, {"admin": new_key.name, "key": new_key.text()}, id_, ts)
