"""queryd's access control (issue 15) attacked: each refused request gets the right status
and JSON, appends nothing and reads nothing. The recall path runs over both logs."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from daemon_support import FAST, Seeded, in_process, seed
from fastapi.testclient import TestClient

from producers.keys.token_store import TokenStore
from producers.memory import Memory
from schemas.tokens import TOKEN_PREFIX

A_TOKEN = re.compile(r"mst_[0-9a-f]{12}_[A-Za-z0-9_-]{8}")
SECRET_WORD = "chase"  # in a seeded message: an answer that leaked content has it


@dataclasses.dataclass
class Tokens:
    path: Path
    read: str
    recall: str
    admin: str
    other_log: str
    expired: str
    revoked: str
    revoked_id: str


def head(location: str) -> int | None:
    with Memory(location) as memory:
        return memory.log.head()


def make_tokens(path: Path, log: str) -> Tokens:
    now = datetime.now(UTC)
    later = now + timedelta(days=1)
    with TokenStore.create(path) as store:
        read, _ = store.issue(log, "read", "agent:reader", later)
        recall, _ = store.issue(log, "recall", "agent:alice", later)
        admin, _ = store.issue(log, "admin", "agent:root", later)
        other, _ = store.issue("another-log", "admin", "agent:alice", later)
        expired, _ = store.issue(
            log, "admin", "agent:alice", now + timedelta(seconds=1), now - timedelta(days=2)
        )
        revoked, record = store.issue(log, "admin", "agent:alice", later)
        store.revoke(record.id)
    # the expired one's expiry is one second from now: let it pass
    while datetime.now(UTC) < now + timedelta(seconds=1.05):
        pass
    return Tokens(path, read, recall, admin, other, expired, revoked, record.id)


@pytest.fixture
def guarded(seeded: Seeded, tmp_path: Path) -> Iterator[tuple[TestClient, Tokens, Seeded]]:
    tokens = make_tokens(tmp_path / "tokens.db", seeded.name)
    settings = dataclasses.replace(FAST, tokens=str(tokens.path), tokens_refresh=0.1)
    with in_process([seeded.location], settings) as client:
        yield client, tokens, seeded


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_refused(answer, status: int, missing: str, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"detail", "message", "seq"}
    assert body["detail"]["missing"] == missing
    for word in words:
        assert word in body["message"], body["message"]
    assert not A_TOKEN.search(answer.text)  # no token, ours or the one sent, in the answer
    assert SECRET_WORD not in answer.text  # nothing of the log read
    if status == 401:
        assert answer.headers["www-authenticate"].startswith("Bearer")


def forged(token: str) -> str:
    """`token` with the same id and one character of the secret changed: the right shape."""
    last = token[-1]
    return token[:-1] + ("A" if last != "A" else "B")


# --- the recall path, on both logs: nothing appended by a refused recall ---------------------


def test_refused_recalls_append_nothing(guarded: tuple[TestClient, Tokens, Seeded]) -> None:
    client, tokens, seeded = guarded
    url = f"/logs/{seeded.name}/recall"
    before = head(seeded.location)
    attacks = [
        ({}, 401, "token", "missing"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "token", "malformed"),
        ({"Authorization": "Bearer"}, 401, "token", "malformed"),
        (bearer("not-a-token"), 401, "token", "malformed"),
        (bearer(forged(tokens.admin)), 401, "token", "unknown"),
        (bearer(TOKEN_PREFIX + "0" * 12 + "_" + "x" * 43), 401, "token", "unknown"),
        (bearer(tokens.expired), 401, "token", "expired"),
        (bearer(tokens.revoked), 401, "token", "revoked", tokens.revoked_id),
        (bearer(tokens.other_log), 403, "log", "another-log"),
        (bearer(tokens.read), 403, "scope", "'recall'", "'read'"),
    ]
    for headers, status, missing, *words in attacks:
        answer = client.post(url, json={"query": "cat"}, headers=headers)
        assert_refused(answer, status, missing, *words)
    # a recall token naming another agent as the actor: refused, never used
    answer = client.post(
        url, json={"query": "cat", "actor": "agent:bob"}, headers=bearer(tokens.recall)
    )
    assert_refused(answer, 403, "actor", "agent:alice", "agent:bob")
    assert head(seeded.location) == before  # nothing appended by any of them

    # the token's agent is the actor: named or not
    for body in ({"query": "cat"}, {"query": "cat", "actor": "agent:alice"}):
        answer = client.post(url, json=body, headers=bearer(tokens.recall))
        assert answer.status_code == 200, answer.text
        assert answer.json()["recall"]["actor"] == "agent:alice"
    assert head(seeded.location) == (before or 0) + 2
    with Memory(seeded.location) as memory:
        recalls = [e for e in memory.events() if e.kind == "recall"]
    assert [r.actor for r in recalls[-2:]] == ["agent:alice", "agent:alice"]
    answer = client.post(url, json={"query": "cat"}, headers=bearer(tokens.admin))
    assert answer.status_code == 200 and answer.json()["recall"]["actor"] == "agent:root"


# --- reads --------------------------------------------------------------------------------


READS = [
    "/logs/{log}",
    "/logs/{log}/state",
    "/logs/{log}/events",
    "/logs/{log}/search?q=cat",
    "/logs/{log}/activity",
    "/logs/{log}/diff?from_seq=0&to_seq=1",
    "/logs/{log}/graph/stats",
    "/logs/{log}/rejections",
    "/logs/{log}/proofs/inclusion?seq=0",
    "/logs/{log}/lifecycle?limit=1",
    "/ui/logs/{log}/timeline",
]


@pytest.mark.parametrize("path", READS)
def test_reads_need_a_read_token_of_their_log(
    guarded: tuple[TestClient, Tokens, Seeded], path: str
) -> None:
    client, tokens, seeded = guarded
    url = path.format(log=seeded.name)
    for headers, status, missing in [
        ({}, 401, "token"),
        (bearer(forged(tokens.read)), 401, "token"),
        (bearer(tokens.expired), 401, "token"),
        (bearer(tokens.revoked), 401, "token"),
        (bearer(tokens.other_log), 403, "log"),
    ]:
        answer = client.get(url, headers=headers)
        if path.startswith("/ui/"):  # the web view answers in HTML: a sign-in form or error
            assert answer.status_code == status
            assert SECRET_WORD not in answer.text and not A_TOKEN.search(answer.text)
            assert ('id="login"' in answer.text) == (status == 401)
        else:
            assert_refused(answer, status, missing)
    if "lifecycle" in path and seeded.location.startswith("kafka"):
        return  # the stream needs the projector; that the guard let it through is enough
    for token in (tokens.read, tokens.recall, tokens.admin):
        answer = client.get(url, headers=bearer(token))
        if "proofs" in path:  # let through; this log has no signed checkpoint: a 404
            assert answer.status_code == 404 and "checkpoint" in answer.text
        else:
            assert answer.status_code == 200, answer.text
        if path.endswith("/state"):
            assert SECRET_WORD in answer.text  # what a refused answer would have leaked


def test_service_routes_stay_open_and_listings_show_the_granted_log(
    guarded: tuple[TestClient, Tokens, Seeded],
) -> None:
    client, tokens, seeded = guarded
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/ui/login"):
        assert client.get(path).status_code == 200, path
    assert_refused(client.get("/logs"), 401, "token")
    assert_refused(client.get("/no/such/route"), 401, "token")  # deny by default
    names = [s["name"] for s in client.get("/logs", headers=bearer(tokens.read)).json()["logs"]]
    assert names == [seeded.name]
    # a token of another log sees no log at all
    answer = client.get("/logs", headers=bearer(tokens.other_log))
    assert answer.status_code == 200 and answer.json()["logs"] == []


def test_a_token_revoked_or_created_while_serving_takes_effect(
    guarded: tuple[TestClient, Tokens, Seeded],
) -> None:
    client, tokens, seeded = guarded
    url = f"/logs/{seeded.name}/state"
    assert client.get(url, headers=bearer(tokens.read)).status_code == 200
    with TokenStore.open(tokens.path) as store:
        record = next(r for r in store.list() if r.agent == "agent:reader")
        store.revoke(record.id)
        fresh, _ = store.issue(seeded.name, "read", "agent:late", datetime.now(UTC) + timedelta(1))
    client.app.state.daemon.access.refresh()  # type: ignore[attr-defined]  # (or wait 0.1 s)
    assert_refused(client.get(url, headers=bearer(tokens.read)), 401, "token", "revoked")
    assert client.get(url, headers=bearer(fresh)).status_code == 200


def test_an_unreadable_store_fails_closed(guarded: tuple[TestClient, Tokens, Seeded]) -> None:
    client, tokens, seeded = guarded
    verifier = client.app.state.daemon.access  # type: ignore[attr-defined]
    verifier.store.close()  # the file's connection gone: every read of it fails
    verifier.refresh()
    answer = client.get(f"/logs/{seeded.name}/state", headers=bearer(tokens.admin))
    assert answer.status_code == 503 and "token store" in answer.json()["message"]
    assert client.get("/healthz").status_code == 200


def test_the_web_view_signs_in_with_a_cookie(guarded: tuple[TestClient, Tokens, Seeded]) -> None:
    client, tokens, seeded = guarded
    page = f"/ui/logs/{seeded.name}/timeline"
    assert client.get(page).status_code == 401
    answer = client.post(
        "/ui/login",
        data={"token": forged(tokens.read), "next": page},
        follow_redirects=False,
    )
    assert answer.status_code == 401 and "unknown" in answer.text
    assert "set-cookie" not in answer.headers
    answer = client.post(
        "/ui/login", data={"token": tokens.read, "next": page}, follow_redirects=False
    )
    assert answer.status_code == 303 and answer.headers["location"] == page
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=" in cookie
    assert client.get(page).status_code == 200  # the client keeps the cookie
    assert client.get(f"/logs/{seeded.name}/events").status_code == 200
    # the cookie alone does not recall: a POST signed in by it needs this daemon's Origin
    before = head(seeded.location)
    client.cookies.set("memstream_token", tokens.recall)
    answer = client.post(f"/logs/{seeded.name}/recall", json={"query": "cat"})
    assert_refused(answer, 403, "origin")
    answer = client.post(
        f"/logs/{seeded.name}/recall",
        json={"query": "cat"},
        headers={"Origin": "http://evil.example"},
    )
    assert_refused(answer, 403, "origin")
    assert head(seeded.location) == before
    answer = client.post(
        f"/logs/{seeded.name}/recall", json={"query": "cat"}, headers={"Origin": "http://localhost"}
    )
    assert answer.status_code == 200 and answer.json()["recall"]["actor"] == "agent:alice"
    # never an open redirect
    answer = client.post(
        "/ui/login", data={"token": tokens.read, "next": "//evil.example/"}, follow_redirects=False
    )
    assert answer.headers["location"] == "/ui/"


def test_no_token_in_the_daemons_log(
    guarded: tuple[TestClient, Tokens, Seeded], caplog: pytest.LogCaptureFixture
) -> None:
    client, tokens, seeded = guarded
    with caplog.at_level(logging.DEBUG):
        for token in (tokens.read, forged(tokens.read), tokens.revoked, "mst_garbage"):
            client.get(f"/logs/{seeded.name}/state", headers=bearer(token))
        client.post("/ui/login", data={"token": tokens.read})
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    access = [r for r in caplog.records if r.name == "memstream.queryd.access"]
    assert [r.__dict__.get("agent") for r in access[:2]] == ["agent:reader", None]  # who read
    for token in (tokens.read, tokens.revoked):
        assert token not in text and token.split("_", 2)[2] not in text


def test_without_tokens_the_daemon_is_open_as_before(seeded: Seeded) -> None:
    """No --tokens: no token asked, and a Recall's actor is what the caller says."""
    with in_process([seeded.location]) as client:
        assert client.get(f"/logs/{seeded.name}/state").status_code == 200
        answer = client.post(
            f"/logs/{seeded.name}/recall", json={"query": "cat", "actor": "agent:anyone"}
        )
        assert answer.status_code == 200 and answer.json()["recall"]["actor"] == "agent:anyone"


def test_a_daemon_refuses_to_start_on_a_missing_store(tmp_path: Path) -> None:
    from producers.keys.token_store import TokenStoreError
    from queryd.daemon import create_app

    location = str(tmp_path / "memory-db")
    seed(location)
    settings = dataclasses.replace(FAST, tokens=str(tmp_path / "none.db"))
    with pytest.raises(TokenStoreError, match="none.db: no such file"):
        create_app([location], settings)
    assert not (tmp_path / "none.db").exists()  # a reader never creates it
