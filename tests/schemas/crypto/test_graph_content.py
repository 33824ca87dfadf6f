"""Where graph envelopes carry items' free text (`schemas.crypto.graph_content`)."""

from __future__ import annotations

import copy
from typing import Any
from uuid import UUID

from schemas.crypto.graph_content import (
    ContentSlot,
    binding,
    content_slots,
    item_subject,
    map_content,
    map_payload,
)
from schemas.records import GraphEnvelope

TS = "2026-12-04T10:00:00.000Z"


def _envelope(
    payload: Any, type_: str = "memory.create", namespace: str = "memory"
) -> GraphEnvelope:
    return GraphEnvelope(id="env-1", namespace=namespace, type=type_, ts=TS, payload=payload)


def _create(item_id: str, content: Any) -> dict[str, Any]:
    return {"type": "memory.create", "item": {"id": item_id, "scope": "s", "content": content}}


def _update(item_id: str, content: Any) -> dict[str, Any]:
    return {"type": "memory.update", "item_id": item_id, "partial": {"content": content}}


def _tag(slot: ContentSlot, key: str, value: Any) -> str:
    return f"sealed({slot.item_id},{key},{value})"


def test_create_and_update_carry_their_items_content() -> None:
    create = _envelope(_create("i1", {"text": "ana's card", "n": 1}))
    assert content_slots(create) == [ContentSlot("i1", ("item", "content"), "s")]
    sealed = map_content(create, _tag)
    assert sealed.payload["item"]["content"] == {
        "text": "sealed(i1,text,ana's card)",
        "n": "sealed(i1,n,1)",
    }
    assert sealed.payload["item"]["scope"] == "s"  # only content values change
    assert create.payload["item"]["content"] == {"text": "ana's card", "n": 1}  # untouched
    update = _envelope(_update("i1", {"text": "new"}), "memory.update")
    assert content_slots(update) == [ContentSlot("i1", ("partial", "content"))]
    assert map_content(update, _tag).payload["partial"]["content"] == {
        "text": "sealed(i1,text,new)"
    }


def test_batches_and_slices_carry_each_items_content() -> None:
    batch = _envelope(
        {"commands": [_create("a", {"t": "x"}), {"type": "edge.create"}, _update("b", {"t": "y"})]},
        "memstream.batch",
        "memstream",
    )
    assert content_slots(batch) == [
        ContentSlot("a", ("commands", 0, "item", "content"), "s"),
        ContentSlot("b", ("commands", 2, "partial", "content")),
    ]
    commands = map_content(batch, _tag).payload["commands"]
    assert commands[0]["item"]["content"] == {"t": "sealed(a,t,x)"}
    assert commands[1] == {"type": "edge.create"}
    assert commands[2]["partial"]["content"] == {"t": "sealed(b,t,y)"}
    piece = _envelope(
        {"slice": {"memories": [{"id": "m", "scope": "p", "content": {"t": "z"}}], "edges": []}},
        "memstream.import_slice",
        "memstream",
    )
    assert content_slots(piece) == [ContentSlot("m", ("slice", "memories", 0, "content"), "p")]
    assert map_content(piece, _tag).payload["slice"]["memories"][0]["content"] == {
        "t": "sealed(m,t,z)"
    }


def test_what_carries_no_content_is_left_as_it_is() -> None:
    for envelope in [
        _envelope({"type": "memory.retract", "item_id": "i"}, "memory.retract"),
        _envelope(_create("i", "not an object")),
        _envelope(_update("i", None), "memory.update"),
        _envelope(["not", "an", "object"]),
        _envelope(None),
        _envelope({"commands": "nope"}, "memstream.batch", "memstream"),
        _envelope(
            {"slice": {"memories": [1, {"content": []}]}}, "memstream.import_slice", "memstream"
        ),
        _envelope({"item_id": "i"}, "memstream.cascade_retract", "memstream"),
        # a memory command's shape inside an operation that is not a batch: not content
        _envelope(_create("i", {"t": "x"}), "memstream.mark_alias", "memstream"),
    ]:
        before = copy.deepcopy(envelope.payload)
        assert content_slots(envelope) == []
        assert map_content(envelope, _tag) is envelope
        assert envelope.payload == before


def test_a_sealed_value_is_bound_to_its_item_and_key_not_its_envelope() -> None:
    slot = ContentSlot("i1", ("item", "content"))
    assert binding(slot, "text") != binding(slot, "n")
    assert binding(slot, "text") != binding(ContentSlot("i2", slot.path), "text")
    # the same item and key in another envelope (another path): bound alike
    assert binding(slot, "text") == binding(ContentSlot("i1", ("partial", "content")), "text")
    event_id, field = binding(slot, "text")
    assert isinstance(event_id, UUID) and field == "content:text"


def test_an_items_subject_is_its_meta_subject_else_its_scope_else_the_item() -> None:
    assert item_subject({"id": "i", "scope": "s", "meta": {"subject": "ana"}}) == "ana"
    assert item_subject({"id": "i", "scope": "s", "meta": {"subject": ""}}) == "s"
    assert item_subject({"id": "i", "scope": "s", "meta": {"subject": 3}}) == "s"
    assert item_subject({"id": "i", "scope": "s", "meta": None}) == "s"
    assert item_subject({"id": "i", "scope": ""}) == "item:i"
    assert item_subject({"id": "i", "scope": "event:x", "meta": {"subject": "event:y"}}) == "item:i"


def test_map_payload_asks_for_a_transform_once_per_content_object() -> None:
    batch = _envelope(
        {"commands": [_create("a", {"t": "x", "u": "y"}), _update("b", {"t": "z"})]},
        "memstream.batch",
        "memstream",
    )
    asked: list[str | None] = []

    def transform_for(slot: ContentSlot) -> Any:
        asked.append(slot.item_id)
        return lambda key, value: _tag(slot, key, value)

    payload = map_payload(batch, transform_for)
    assert asked == ["a", "b"]
    assert payload == map_content(batch, _tag).payload
    assert payload["commands"][0]["item"]["content"]["u"] == "sealed(a,u,y)"
    plain = _envelope({"type": "edge.create"}, "edge.create")
    assert map_payload(plain, transform_for) is plain.payload and asked == ["a", "b"]
