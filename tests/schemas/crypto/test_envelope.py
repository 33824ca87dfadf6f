"""The sealed form of content: it opens only with its key, for its event and field."""

from __future__ import annotations

import uuid

import pytest

from schemas.crypto.envelope import (
    CONVERGENT_PREFIX,
    PREFIX,
    WRAPPED_PREFIX,
    SealedError,
    is_sealed,
    new_key,
    new_key_id,
    open_convergent,
    open_sealed,
    parse,
    seal,
    seal_convergent,
    seal_wrapped,
)

EVENT = uuid.UUID("00000000-0000-4000-8000-000000000001")
OTHER = uuid.UUID("00000000-0000-4000-8000-000000000002")


def _sealed(text: str = "card 4111 1111 1111 1111", key: bytes | None = None) -> tuple[str, bytes]:
    key = key or new_key()
    return seal(text, event_id=EVENT, field="content", key_id=new_key_id(), key=key), key


def test_round_trip_and_no_plaintext() -> None:
    token, key = _sealed()
    assert is_sealed(token) and token.startswith(PREFIX)
    assert "4111" not in token and "card" not in token
    assert open_sealed(parse(token), event_id=EVENT, field="content", key=key) == (
        "card 4111 1111 1111 1111"
    )


def test_each_seal_has_its_own_nonce() -> None:
    key = new_key()
    a, _ = _sealed("same", key)
    b, _ = _sealed("same", key)
    assert a.count(":") == 2 and a.startswith("msenc2:")  # the direct form: no wrapped key
    assert parse(a).ciphertext[:12] != parse(b).ciphertext[:12]  # nonces differ
    assert a != b


def test_a_part_of_one_form_never_opens_as_the_other() -> None:
    """The wrapped form's wrapped data key is AES-GCM under the subject key, bound to the
    event and field, as the direct form's content is: moved into a direct value it must
    not open (and hand out the data key as if it were content), even were its plaintext
    text; nor the other way round."""
    import base64

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    key, key_id = new_key(), new_key_id()
    wrapped = seal_wrapped("card 4111", event_id=EVENT, field="content", key_id=key_id, key=key)
    _, _, wrapped_key, _ = wrapped.split(":")
    # what the wrapped form's binding seals under the subject key, text this time
    nonce = bytes(range(12))
    like_a_wrapped_key = nonce + AESGCM(key).encrypt(nonce, b"k" * 32, EVENT.bytes + b"content")
    body = base64.urlsafe_b64encode(like_a_wrapped_key).rstrip(b"=").decode()
    for moved in (wrapped_key, body):
        with pytest.raises(SealedError, match="does not open"):
            open_sealed(
                parse(f"{PREFIX}{key_id}:{moved}"), event_id=EVENT, field="content", key=key
            )
    direct = seal("card 4111", event_id=EVENT, field="content", key_id=key_id, key=key)
    body = direct.split(":")[2]
    # a direct body as the wrapped key of a wrapped value is not even a wrapped key's size,
    # and as its content it fails under any data key the wrapped key gives
    with pytest.raises(SealedError):
        open_sealed(
            parse(f"{WRAPPED_PREFIX}{key_id}:{wrapped_key}:{body}"),
            event_id=EVENT,
            field="content",
            key=key,
        )


def test_a_wrapped_seal_is_the_same_for_the_same_value_binding_and_key() -> None:
    key, key_id = new_key(), new_key_id()

    def sealed(
        text: str, event_id: uuid.UUID = EVENT, field: str = "content", k: bytes = key
    ) -> str:
        return seal_wrapped(text, event_id=event_id, field=field, key_id=key_id, key=k)

    token = sealed("card 4111")
    assert token == sealed("card 4111") and "4111" not in token
    assert open_sealed(parse(token), event_id=EVENT, field="content", key=key) == "card 4111"
    # Anything else changed, it differs: the value, the event, the field, the key.
    others = [sealed("card 4112"), sealed("card 4111", OTHER), sealed("card 4111", field="t")]
    others.append(sealed("card 4111", k=new_key()))
    assert len({token, *others}) == 5
    assert len({t.split(":")[2] for t in [token, *others]}) == 5  # wrapped data keys too
    with pytest.raises(SealedError, match="does not open"):
        open_sealed(parse(token), event_id=OTHER, field="content", key=key)


ITEM = len(b"item-1").to_bytes(4, "big") + b"item-1" + b"text"
OTHER_ITEM = len(b"item-2").to_bytes(4, "big") + b"item-2" + b"text"


def test_a_convergent_seal_is_the_same_for_the_same_value_binding_and_key() -> None:
    key, key_id = new_key(), new_key_id()

    def sealed(text: str, binding: bytes = ITEM, k: bytes = key) -> str:
        return seal_convergent(text, binding=binding, key_id=key_id, key=k)

    token = sealed('"card 4111"')
    assert token == sealed('"card 4111"') and "4111" not in token
    assert token.startswith(CONVERGENT_PREFIX) and token.count(":") == 2
    assert open_convergent(parse(token), binding=ITEM, key=key) == '"card 4111"'
    # Anything else changed, it differs: the value, the binding, the key.
    others = [sealed('"card 4112"'), sealed('"card 4111"', OTHER_ITEM)]
    others.append(sealed('"card 4111"', k=new_key()))
    assert len({token, *others}) == 4
    for binding, k in ((OTHER_ITEM, key), (ITEM, new_key())):
        with pytest.raises(SealedError, match="does not open"):
            open_convergent(parse(token), binding=binding, key=k)
    head, body = token.rsplit(":", 1)
    flipped = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
    with pytest.raises(SealedError):
        open_convergent(parse(f"{head}:{flipped}"), binding=ITEM, key=key)


def test_a_convergent_value_never_opens_as_an_event_s_nor_the_other_way_round() -> None:
    """The GCM-SIV form's body is not an AES-GCM body: moved under the event form's prefix
    (or the other way round) it is refused, whatever the binding given."""
    key, key_id = new_key(), new_key_id()
    convergent = seal_convergent("card 4111", binding=ITEM, key_id=key_id, key=key)
    direct = seal("card 4111", event_id=EVENT, field="content", key_id=key_id, key=key)
    with pytest.raises(SealedError, match="graph value"):
        open_sealed(parse(convergent), event_id=EVENT, field="content", key=key)
    with pytest.raises(SealedError, match="not 'msenc3:'"):
        open_convergent(parse(direct), binding=ITEM, key=key)
    moved = PREFIX + convergent[len(CONVERGENT_PREFIX) :]
    with pytest.raises(SealedError):
        open_sealed(parse(moved), event_id=EVENT, field="content", key=key)
    moved = CONVERGENT_PREFIX + direct[len(PREFIX) :]
    with pytest.raises(SealedError, match="does not open"):
        open_convergent(parse(moved), binding=ITEM, key=key)


@pytest.mark.parametrize(
    ("event_id", "field", "wrong_key"),
    [(OTHER, "content", False), (EVENT, "text", False), (EVENT, "content", True)],
    ids=["moved-to-another-event", "moved-to-another-field", "wrong-key"],
)
def test_does_not_open_elsewhere_or_with_another_key(
    event_id: uuid.UUID, field: str, wrong_key: bool
) -> None:
    token, key = _sealed()
    with pytest.raises(SealedError, match="does not open"):
        open_sealed(
            parse(token), event_id=event_id, field=field, key=new_key() if wrong_key else key
        )


def test_a_changed_byte_does_not_open() -> None:
    token, key = _sealed()
    head, body = token.rsplit(":", 1)
    flipped = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
    with pytest.raises(SealedError):
        open_sealed(parse(f"{head}:{flipped}"), event_id=EVENT, field="content", key=key)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("plain text", "not a sealed value"),
        (PREFIX + "abc", "expected 2 parts"),
        (PREFIX + "a:b:c", "expected 2 parts"),
        (PREFIX + "zz:a", "key id"),
        (PREFIX + "0" * 32 + ":!!!", "not base64url|sealed content of"),
        (PREFIX + "0" * 32 + ":AA", "sealed content of"),
        (CONVERGENT_PREFIX + "abc", "expected 2 parts"),
        (CONVERGENT_PREFIX + "0" * 32 + ":a:b", "expected 2 parts"),
        (CONVERGENT_PREFIX + "0" * 32 + ":AAAA", "sealed content of"),
        (WRAPPED_PREFIX + "abc", "expected 3 parts"),
        (WRAPPED_PREFIX + "zz:a:b", "key id"),
        (WRAPPED_PREFIX + "0" * 32 + ":!!!:b", "not base64url|wrapped data key of"),
        (WRAPPED_PREFIX + "0" * 32 + ":" + "A" * 80 + ":AA", "sealed content of"),
    ],
)
def test_malformed_values_are_named(value: str, message: str) -> None:
    with pytest.raises(SealedError, match=message):
        parse(value)
