"""Helpers of the query daemon's tests: seeding a log, in-process and subprocess daemons."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from producers.logs.location import is_kafka_location, parse_kafka_location
from producers.memory import Memory
from projector.status import ProjectorStatus, encode_status, status_key
from queryd.daemon import DaemonSettings, create_app
from schemas.audit import Document, Message
from schemas.graph.envelopes import now_iso
from schemas.graph.ids import uuid7
from schemas.graph.items import create_edge, create_memory_item
from schemas.records import GraphEnvelope

REPO_ROOT = Path(__file__).resolve().parents[3]
MEMSTREAM = Path(sys.executable).with_name("memstream")


# --- locations: behaviour both modes share runs over both -------------------------------------


def _embedded(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "memory-db")


def _kafka(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    redis_url = request.getfixturevalue("redis_url")
    name = request.getfixturevalue("unique_name")
    return f"kafka://{bootstrap}/{name}?redis={redis_url}"


LOCATIONS: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "embedded": _embedded,
    "kafka": _kafka,
}


# --- a seeded log ---------------------------------------------------------------------------


def envelope(payload: dict[str, Any]) -> GraphEnvelope:
    kind = payload["type"]
    return GraphEnvelope(
        id=uuid7(), namespace=kind.split(".")[0], type=kind, ts=now_iso(), payload=payload
    )


def item_payload(id: str, **kw: Any) -> dict[str, Any]:
    made = create_memory_item(
        id=id,
        scope=kw.pop("scope", "user:laz/general"),
        kind=kw.pop("kind", "observation"),
        content=kw.pop("content", {"text": f"item {id}"}),
        author=kw.pop("author", "agent:a"),
        source_kind=kw.pop("source_kind", "observed"),
        authority=kw.pop("authority", 0.5),
        **kw,
    )
    return made.model_dump(mode="json", by_alias=True, exclude_none=True)


def edge_payload(edge_id: str, from_: str, to: str, kind: str) -> dict[str, Any]:
    made = create_edge(
        edge_id=edge_id,
        from_=from_,
        to=to,
        kind=kind,
        author="agent:a",
        source_kind="observed",
        authority=0.9,
    )
    return made.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass
class Seeded:
    """What `seed` wrote: ids by role, and the seq of each step."""

    location: str
    name: str
    messages: list[Message] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    deleted_id: Any = None
    deletion_seq: int = -1
    last_seq: int = -1


# item ids (fixed, so tests read plainly); UUIDv7-shaped ids are not required by the graph
ROOT, CHILD, GRANDCHILD, STALE, ALIAS, OTHER = (
    "i-root",
    "i-child",
    "i-grand",
    "i-stale",
    "i-alias",
    "i-other",
)


def graph_records() -> list[GraphEnvelope]:
    return [
        envelope(
            {
                "type": "memory.create",
                "item": item_payload(
                    ROOT, authority=0.9, importance=0.8, content={"text": "root fact"}
                ),
            }
        ),
        envelope(
            {
                "type": "memory.create",
                "item": item_payload(
                    CHILD, parents=[ROOT], authority=0.7, content={"text": "a child"}
                ),
            }
        ),
        envelope(
            {
                "type": "memory.create",
                "item": item_payload(GRANDCHILD, parents=[CHILD], authority=0.3, author="agent:b"),
            }
        ),
        envelope(
            {
                "type": "memory.create",
                "item": item_payload(STALE, parents=["i-ghost"], authority=0.2, scope="user:other"),
            }
        ),
        envelope({"type": "memory.create", "item": item_payload(ALIAS, authority=0.6)}),
        envelope(
            {
                "type": "memory.create",
                "item": item_payload(OTHER, authority=0.8, content={"text": "x" * 500}),
            }
        ),
        envelope(
            {"type": "edge.create", "edge": edge_payload("e-contra", ROOT, OTHER, "CONTRADICTS")}
        ),
        envelope({"type": "edge.create", "edge": edge_payload("e-alias1", ROOT, ALIAS, "ALIAS")}),
        envelope({"type": "edge.create", "edge": edge_payload("e-alias2", ALIAS, ROOT, "ALIAS")}),
        envelope(
            {
                "type": "intent.create",
                "intent": {
                    "id": "n-1",
                    "label": "ship",
                    "priority": 0.7,
                    "owner": "agent:a",
                    "status": "active",
                    "root_memory_ids": [ROOT],
                },
            }
        ),
        envelope(
            {
                "type": "task.create",
                "task": {
                    "id": "t-1",
                    "intent_id": "n-1",
                    "action": "write",
                    "status": "pending",
                    "priority": 0.5,
                    "input_memory_ids": [ROOT],
                },
            }
        ),
    ]


def seed(location: str) -> Seeded:
    """Messages, a document, a deletion, a recall, and a small graph, in one log."""
    from queryd.daemon import log_name

    out = Seeded(location=location, name=log_name(location))
    with Memory(location) as memory:
        for i, text in enumerate(
            [
                "the cat sat on the mat",
                "dogs chase cats",
                "weather is sunny today",
                "the cat is black",
            ]
        ):
            out.messages.append(
                memory.add_message(Message(speaker="user", content=text, session_id=f"s{i % 2}"))
            )
        out.documents.append(memory.add_document(Document(name="notes.txt", text="a cat document")))
        deletion = memory.delete(out.messages[3].id, "user asked", requested_by="user")
        out.deleted_id, out.deletion_seq = out.messages[3].id, deletion.seq
        memory.recall("cat", limit=2, session_id="s0")
        appended, _ = memory.log.transact(lambda state: (graph_records(), None))
        out.last_seq = appended[-1].seq
    return out


# --- the daemon -------------------------------------------------------------------------------


FAST = DaemonSettings(
    min_seq_timeout=1.0,
    poll_interval=0.01,
    sse_keepalive=1.0,
    probe_interval=0.2,
    reopen_interval=0.5,
)


@contextmanager
def in_process(locations: list[str], settings: DaemonSettings = FAST) -> Iterator[TestClient]:
    app = create_app(locations, settings)
    with TestClient(app, base_url="http://localhost") as client:
        assert app.state.daemon.registry.wait_ready(60), "the logs did not hydrate"
        yield client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    locations: list[str],
    *extra: str,
    timeout: float = 60,
    output: Path | None = None,
    ready: bool = True,
    preexec_fn: Callable[[], None] | None = None,
    procs: list[subprocess.Popen[bytes]] | None = None,
) -> Iterator[str]:
    """A real `memstream queryd serve` on a free loopback port; yields its base URL.

    Its output goes to `output` (default: a temporary file), never to a pipe nobody reads.
    `ready=False` waits only for it to answer (/healthz), not for its logs; `preexec_fn`
    runs in the child before it starts (a lowered ulimit, say); `procs` gets the process.
    """
    port = free_port()
    args = [
        str(MEMSTREAM),
        "queryd",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--poll-interval",
        "0.01",
        *extra,
    ]
    for location in locations:
        args += ["--log", location]
    with tempfile.TemporaryDirectory() as scratch:
        out_path = output or Path(scratch) / "queryd.log"
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                args,
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
                preexec_fn=preexec_fn,
            )
        if procs is not None:
            procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        probe = "/readyz" if ready else "/healthz"
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise AssertionError(
                        f"queryd exited with {proc.returncode}:\n{out_path.read_text()}"
                    )
                try:
                    if httpx.get(f"{base}{probe}", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"queryd did not get ready:\n{out_path.read_text()}")
                time.sleep(0.1)
            yield base
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


@contextmanager
def projector_for(location: str) -> Iterator[None]:
    """On Kafka, the projector service running beside the daemon (it publishes the
    lifecycle topic and the Redis snapshots); on the embedded log, nothing to run."""
    if not is_kafka_location(location):
        yield
        return
    import threading

    from projector.service import Projector

    stop = threading.Event()
    projector = Projector(location, every_ms=20)
    thread = threading.Thread(target=projector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


# --- waiting, and the projector's status ------------------------------------------------------


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """What `check` returns once it is true, asked every `interval` s; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(interval)


def write_status(
    redis_url: str,
    location: str,
    *,
    folded: int | None,
    published: int | None,
    log_end: int,
    age_s: float = 0.0,
    lease_ms: int = 60_000,
) -> None:
    """Write to Redis the status record a running projector writes."""
    status = ProjectorStatus(
        owner="test-projector",
        host="here",
        pid=1,
        folded_seq=folded,
        log_end=log_end,
        published_seq=published,
        heartbeat_ms=int((time.time() - age_s) * 1000),
        lease_ms=lease_ms,
    )
    key = status_key(parse_kafka_location(location).key_prefix)
    with redis.Redis.from_url(redis_url, socket_timeout=5) as client:
        client.set(key, encode_status(status))
