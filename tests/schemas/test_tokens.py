"""The pure checks of queryd's bearer tokens (schemas.tokens): form, hash, scopes, expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.tokens import (
    SCOPES,
    ScopeRefused,
    TokenRecord,
    TokenRefused,
    authorize,
    check_token,
    new_token,
    parse_lifetime,
    scope_allows,
    token_hash,
    token_id_of,
)

NOW = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)


def record(token: str, token_id: str, **kw: object) -> TokenRecord:
    values: dict[str, object] = {
        "log": "memory-db",
        "scope": "recall",
        "agent": "agent:alice",
        "created": NOW - timedelta(days=1),
        "expires": NOW + timedelta(days=1),
        "revoked": None,
    }
    values.update(kw)
    return TokenRecord(token_id, token_hash(token), **values)  # type: ignore[arg-type]


def test_new_tokens_are_random_and_of_the_documented_form() -> None:
    made = {new_token() for _ in range(200)}
    assert len({t for t, _ in made}) == 200
    for token, token_id in made:
        assert token.startswith("mst_") and len(token) == 4 + 12 + 1 + 43
        assert token_id_of(token) == token_id
    assert token_id_of("mst_" + "a" * 12 + "_" + "b" * 42) is None  # one character short
    assert token_id_of("mst_" + "A" * 12 + "_" + "b" * 43) is None  # upper-case id
    assert token_id_of("x" * 10_000) is None


def test_a_valid_token_grants_its_record() -> None:
    token, token_id = new_token()
    grant = check_token(token, {token_id: record(token, token_id)}, NOW)
    assert (grant.log, grant.scope, grant.agent) == ("memory-db", "recall", "agent:alice")


@pytest.mark.parametrize(
    ("presented", "change", "said"),
    [
        (None, {}, "missing"),
        ("Bearer", {}, "malformed"),
        ("forged", {}, "unknown"),
        ("other-id", {}, "unknown"),
        ("token", {"revoked": NOW - timedelta(seconds=1)}, "revoked"),
        ("token", {"expires": NOW}, "expired"),
    ],
)
def test_refused_tokens_say_why_and_never_echo_the_token(
    presented: str | None, change: dict[str, object], said: str
) -> None:
    token, token_id = new_token()
    records = {token_id: record(token, token_id, **change)}
    sent = {
        None: None,
        "Bearer": "Bearer",
        "forged": token[:-1] + ("A" if token[-1] != "A" else "B"),
        "other-id": new_token()[0],
        "token": token,
    }[presented]
    with pytest.raises(TokenRefused, match=said) as refused:
        check_token(sent, records, NOW)
    assert refused.value.what == "token"
    assert token not in str(refused.value) and token.split("_", 2)[2] not in str(refused.value)


def test_scopes_are_ordered_and_bound_to_one_log() -> None:
    assert SCOPES == ("read", "recall", "admin")
    allowed = {(g, n) for g in SCOPES for n in SCOPES if scope_allows(g, n)}
    assert allowed == {
        ("read", "read"),
        ("recall", "read"),
        ("recall", "recall"),
        ("admin", "read"),
        ("admin", "recall"),
        ("admin", "admin"),
    }
    assert not scope_allows("root", "read")  # not a scope: nothing
    token, token_id = new_token()
    grant = check_token(token, {token_id: record(token, token_id, scope="read")}, NOW)
    authorize(grant, "memory-db", "read")
    with pytest.raises(ScopeRefused, match="needs scope 'recall'") as refused:
        authorize(grant, "memory-db", "recall")
    assert refused.value.what == "scope"
    with pytest.raises(ScopeRefused, match="grants log 'memory-db', not 'other'") as refused:
        authorize(grant, "other", "read")
    assert refused.value.what == "log"


def test_lifetimes() -> None:
    assert parse_lifetime("30d") == timedelta(days=30)
    assert parse_lifetime("12h") == timedelta(hours=12)
    assert parse_lifetime("2w") == timedelta(weeks=2)
    for bad in ("", "30", "d", "-1d", "0d", "3651d", "1y", "1.5d"):
        with pytest.raises(ValueError, match="expires"):
            parse_lifetime(bad)
