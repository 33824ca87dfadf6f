"""Where a graph envelope carries an item's free text, and a copy of it with that text
transformed (sealed on an encrypted log, opened when served).

An item's ``content`` is a JSON object. Its VALUES are the free text; its keys are field
names. Sealing each value on its own keeps the graph's own update rule exact on sealed
content: ``memory.update`` merges a partial's content into the item's key by key
(`projector.graph.reducer.merge_item`, as the seed does), and sealed values merge as plain
ones do.

The places content travels in a log record (anything else is left alone, so a malformed
payload is the fold's to refuse, not this module's):

- a memory command's envelope (namespace other than ``memstream``): ``memory.create``
  (``payload.item.content``) and ``memory.update`` (``payload.partial.content``);
- ``memstream.batch``: each such command in ``payload.commands``;
- ``memstream.import_slice``: each item of ``payload.slice.memories``.

Pure: no keys, no I/O. The key store's half is `producers.keys.cipher`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache, partial
from typing import Any, NamedTuple
from uuid import NAMESPACE_URL, UUID, uuid5

from schemas.crypto.subjects import EVENT_SUBJECT_PREFIX
from schemas.graph.items import MemoryItem
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope, Record

__all__ = [
    "ContentSlot",
    "ITEM_SUBJECT_PREFIX",
    "ERASE_CONTENT",
    "content_slots",
    "map_content",
    "map_payload",
    "item_subject",
    "subject_of_item",
    "is_erase_content",
    "value_at",
    "binding",
    "content_binding",
    "binding_prefix",
]

_BATCH = f"{OPERATION_NAMESPACE}.batch"
_IMPORT_SLICE = f"{OPERATION_NAMESPACE}.import_slice"
# The type of the graph half of an erasure receipt (`schemas.graph.erasure`).
ERASE_CONTENT = f"{OPERATION_NAMESPACE}.erase_content"
ITEM_SUBJECT_PREFIX = "item:"

# A path step: a dict key or a list index.
Step = str | int


class ContentSlot(NamedTuple):
    """One content object in an envelope's payload: the item it belongs to (its id, or
    None when the command names none), the path to the object from the payload, and the
    item's data subject when the envelope carries the whole item (a create, an imported
    item; None for an update, whose item is elsewhere)."""

    item_id: str | None
    path: tuple[Step, ...]
    subject: str | None = None


def item_subject(item: Mapping[str, Any]) -> str:
    """The data subject of an item's content, by the rule: its ``meta.subject`` when that
    is a non-empty string, else its ``scope``, else the item alone (``item:<id>``); a
    value starting with ``event:`` is passed over."""
    meta = item.get("meta")
    candidates = [meta.get("subject") if isinstance(meta, Mapping) else None, item.get("scope")]
    for subject in candidates:
        # ``event:...`` names one audit event's own key (`schemas.crypto.subjects`): not
        # an item's subject, whose key all its values share.
        if isinstance(subject, str) and subject and not subject.startswith(EVENT_SUBJECT_PREFIX):
            return subject
    return f"{ITEM_SUBJECT_PREFIX}{item.get('id')}"


def subject_of_item(item: MemoryItem) -> str:
    """`item_subject` of an item in a graph state."""
    return item_subject({"id": item.id, "scope": item.scope, "meta": item.meta})


def is_erase_content(record: Record) -> bool:
    """Whether `record` is the graph half of an erasure receipt (`GraphErasure`)."""
    return (
        type(record) is GraphEnvelope
        and record.type == ERASE_CONTENT
        and record.namespace == OPERATION_NAMESPACE
    )


def content_binding(slot: ContentSlot, key: str) -> bytes:
    """What a sealed content value is bound to (`seal_convergent`'s binding): the item and
    the content key, so a value moved to another item or key does not open. Not the
    envelope: the same value of the same item seals alike in any envelope, which keeps
    comparisons of sealed items exact (`schemas.crypto.envelope.seal_convergent`). The
    item id's length first, so that no other item and key give the same bytes."""
    return binding_prefix(slot) + key.encode()


def binding_prefix(slot: ContentSlot) -> bytes:
    """The item's part of `content_binding`, shared by all its content keys."""
    item = (slot.item_id or "").encode()
    return len(item).to_bytes(4, "big") + item


def binding(slot: ContentSlot, key: str) -> tuple[UUID, str]:
    """What a value in the wrapped form (``msenc1``, `seal_wrapped`) is bound to: an event
    id made from the item id, and the content key."""
    return _item_uuid(slot.item_id or ""), f"content:{key}"


@lru_cache(maxsize=4096)
def _item_uuid(item_id: str) -> UUID:
    # One SHA-1 per item, not per value: an item's values are sealed and opened together.
    return uuid5(NAMESPACE_URL, f"memstream:item:{item_id}")


def _item_slot(item: Mapping[str, Any], path: tuple[Step, ...]) -> ContentSlot:
    item_id = item.get("id")
    return ContentSlot(item_id if isinstance(item_id, str) else None, path, item_subject(item))


def _command_slots(command: Any, prefix: tuple[Step, ...]) -> Iterator[ContentSlot]:
    if not isinstance(command, Mapping):
        return
    kind = command.get("type")
    if kind == "memory.create":
        item = command.get("item")
        if isinstance(item, Mapping) and isinstance(item.get("content"), Mapping):
            yield _item_slot(item, (*prefix, "item", "content"))
    elif kind == "memory.update":
        partial = command.get("partial")
        if isinstance(partial, Mapping) and isinstance(partial.get("content"), Mapping):
            item_id = command.get("item_id")
            yield ContentSlot(
                item_id if isinstance(item_id, str) else None, (*prefix, "partial", "content")
            )


def content_slots(envelope: GraphEnvelope) -> list[ContentSlot]:
    """Every content object `envelope` carries, in payload order."""
    payload = envelope.payload
    if not isinstance(payload, Mapping):
        return []
    if envelope.namespace != OPERATION_NAMESPACE:
        return list(_command_slots(payload, ()))
    if envelope.type == _BATCH:
        commands = payload.get("commands")
        if not isinstance(commands, list):
            return []
        return [s for i, c in enumerate(commands) for s in _command_slots(c, ("commands", i))]
    if envelope.type == _IMPORT_SLICE:
        piece = payload.get("slice")
        memories = piece.get("memories") if isinstance(piece, Mapping) else None
        if not isinstance(memories, list):
            return []
        slots = []
        for i, item in enumerate(memories):
            if isinstance(item, Mapping) and isinstance(item.get("content"), Mapping):
                slots.append(_item_slot(item, ("slice", "memories", i, "content")))
        return slots
    return []


def value_at(value: Any, path: tuple[Step, ...]) -> Any:
    """What `path` (a slot's, or a prefix of it) leads to in `value` (a payload)."""
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: tuple[Step, ...], new: Any) -> Any:
    """A copy of `value` with the object at `path` replaced; only the containers on the
    path are copied (the rest is shared, and never modified)."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(value, list):
        copy_list = list(value)
        copy_list[step] = _set(value[step], rest, new)  # type: ignore[index]
        return copy_list
    copy_dict = dict(value)
    copy_dict[step] = _set(value[step], rest, new)
    return copy_dict


def map_payload(
    envelope: GraphEnvelope, transform_for: Callable[[ContentSlot], Callable[[str, Any], Any]]
) -> Any:
    """`envelope`'s payload with each value of each content object replaced by
    ``transform_for(slot)(key, value)`` (asked once per content object, so what a
    transform sets up for its item is set up once); the payload itself (the same object)
    when it carries no content."""
    payload = envelope.payload
    for slot in content_slots(envelope):
        transform = transform_for(slot)
        content = value_at(payload, slot.path)
        new = {key: transform(key, value) for key, value in content.items()}
        payload = _set(payload, slot.path, new)
    return payload


def map_content(
    envelope: GraphEnvelope, transform: Callable[[ContentSlot, str, Any], Any]
) -> GraphEnvelope:
    """`envelope` with each value of each content object replaced by
    ``transform(slot, key, value)``; `envelope` itself when it carries no content."""
    payload = map_payload(envelope, lambda slot: partial(transform, slot))
    if payload is envelope.payload:
        return envelope
    return envelope.model_copy(update={"payload": payload})
