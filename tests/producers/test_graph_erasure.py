"""Graph items' content on an encrypted embedded log: sealed when stored, read back plain,
erased with its subject (`producers.keys.cipher`, `producers.erasure`,
`schemas.crypto.graph_content`), and folded alike by a reader and by a fold without keys."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from producers.keys.cipher import open_record, sealed_values
from producers.keys.held_keys import HeldKeys
from producers.logs.sqlite import LOG_FILE
from producers.memex_log_store import LogGraphs
from producers.memex_store import MemexStore
from producers.memory import Memory
from projector.memex_topic import memex_envelopes
from projector.record_fold import LogState, empty_state, fold_record
from schemas.audit import ERASED, Erasure, Message
from schemas.codec import decode_record
from schemas.crypto.envelope import SealedError, parse
from schemas.crypto.graph_content import ERASE_CONTENT, value_at
from schemas.crypto.graph_erasure import GraphErasure
from schemas.errors import CorruptLogError, EncryptionError, UnknownSubjectError
from schemas.evidence.merkle import leaf_hash
from schemas.graph.items import MemoryItem
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope
from tests.producers.test_erasure import _change_sealed, _found, _stored

CARD = "card 4111111111111111 expires 12/29"
ADDRESS = "12 Rue Quelconque, Paris"
TEA = "bob likes green tea"


def _item(store: MemexStore, scope: str, content: dict[str, Any], **extra: Any) -> MemoryItem:
    return store.create(
        scope=scope,
        kind="observation",
        content=content,
        author="agent:a",
        source_kind="user_explicit",
        authority=0.8,
        **extra,
    )


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "graph-db"
    Memory(path, encrypt=True).close()
    return path


def test_content_values_are_stored_sealed_and_read_back_plain(log_dir: Path) -> None:
    with MemexStore.open(str(log_dir)) as store:
        card = _item(store, "ana", {"text": CARD, "n": 4111, "tags": ["pay"]})
        store.update(card.id, {"content": {"address": ADDRESS}}, author="agent:a")
        tea = _item(store, "bob", {"text": TEA})
        assert store.item(card.id).content == {  # type: ignore[union-attr]
            "text": CARD,
            "n": 4111,
            "tags": ["pay"],
            "address": ADDRESS,
        }
    for needle in (b"4111111111111111", b"Quelconque", b"green tea"):
        assert _found(log_dir, needle) == [], needle
    # Every value is sealed; the content's keys, the scope and the rest stay in clear.
    create = decode_record(_stored(log_dir)[0][1])
    assert isinstance(create, GraphEnvelope)
    content = create.payload["item"]["content"]
    assert set(content) == {"text", "n", "tags"}
    assert all(parse(value).key_id for value in content.values())
    assert create.payload["item"]["scope"] == "ana"
    with MemexStore.open(str(log_dir)) as reader:  # folded from the sealed bytes
        assert reader.item(card.id).content["address"] == ADDRESS  # type: ignore[index]
        assert reader.item(tea.id).content == {"text": TEA}  # type: ignore[union-attr]
        assert reader.dumps() == MemexStore.open(str(log_dir)).dumps()


def test_erase_makes_a_subjects_items_unreadable_everywhere(log_dir: Path) -> None:
    memory = Memory(log_dir)
    store = MemexStore(backend=LogGraphs(memory.log))
    card = _item(store, "ana", {"text": CARD})
    store.update(card.id, {"content": {"address": ADDRESS}}, author="agent:a")
    by_meta = _item(store, "shared", {"text": ADDRESS}, meta={"subject": "ana"})
    tea = _item(store, "bob", {"text": TEA})
    message = memory.add_message(Message(speaker="ana", content=CARD, session_id="ana"))
    live = MemexStore.open(str(log_dir))  # another reader, folded before the erasure
    assert live.item(card.id).content["text"] == CARD  # type: ignore[index]
    keys = memory.log.keys  # type: ignore[attr-defined]
    key = keys.key(keys.shared_key_id("ana"))
    assert key is not None and _found(log_dir, key), "the scan finds the key before"

    erasure = memory.erase("ana", "GDPR art. 17", requested_by="dpo")
    assert isinstance(erasure, Erasure) and erasure.erased == (message.id,)
    # Its graph half, in the same transaction, right after it.
    stored = _stored(log_dir)
    half = decode_record(stored[-1][1])
    assert isinstance(half, GraphEnvelope) and half.type == ERASE_CONTENT
    receipt = GraphErasure.model_validate(half.payload)
    assert receipt.erasure_id == erasure.id and receipt.subject == "ana"
    assert set(receipt.items) == {card.id, by_meta.id}
    assert receipt.seqs == (0, 1, 2)  # the create, the update, the meta.subject item
    assert receipt.leaf_hashes == tuple(leaf_hash(stored[s][1]).hex() for s in receipt.seqs)
    # Eight digits of the card, not four: the receipt's ids and leaf hashes are hex, where
    # "4111" turns up by chance; "41111111" next to never.
    assert b"41111111" not in stored[-1][1] and b"Quelconque" not in stored[-1][1]
    assert b'"n":4111' not in stored[-1][1] and b'"n": 4111' not in stored[-1][1]

    for needle in (key, b"4111111111111111", b"Quelconque"):
        assert _found(log_dir, needle) == [], needle
    erased = {"text": ERASED, "address": ERASED}
    for reader in (store, live, MemexStore.open(str(log_dir))):
        assert reader.item(card.id).content == erased  # type: ignore[union-attr]
        assert reader.item(by_meta.id).content == {"text": ERASED}  # type: ignore[union-attr]
        assert reader.item(tea.id).content == {"text": TEA}  # type: ignore[union-attr]
        assert "4111" not in reader.dumps() and "Quelconque" not in reader.dumps()
    # The subject can come back, under a new key, readable.
    again = _item(store, "ana", {"text": "ana again"})
    assert MemexStore.open(str(log_dir)).item(again.id).content == {"text": "ana again"}  # type: ignore[union-attr]
    with pytest.raises(UnknownSubjectError):
        memory.erase("nobody", "no such subject")
    live.close()
    memory.close()


def test_a_subject_with_graph_content_only_gets_the_graph_receipt(log_dir: Path) -> None:
    with MemexStore.open(str(log_dir)) as store, Memory(log_dir) as memory:
        item = _item(store, "ana", {"text": CARD})
        receipt = memory.erase("ana", "GDPR art. 17")
        assert isinstance(receipt, GraphErasure) and receipt.erasure_id is None
        assert receipt.items == (item.id,)
        assert store.item(item.id).content == {"text": ERASED}  # type: ignore[union-attr]
        with pytest.raises(UnknownSubjectError, match="erased already"):
            memory.erase("ana", "again")


def _keyless(log_dir: Path) -> LogState:
    """The state a fold holding no key (the projector) reaches from the stored bytes."""
    state = empty_state()
    for seq, data in _stored(log_dir):
        state = fold_record(state, seq, data, erasable=True).state
    return state


def _values(data: bytes) -> list[str]:
    """The sealed content values a stored record holds (none but in a graph record)."""
    record = decode_record(data)
    if not isinstance(record, GraphEnvelope):
        return []
    return [value_at(record.payload, slot.path)[key] for slot, key, _ in sealed_values(record)]


def _shape(state: LogState) -> list[tuple[Any, ...]]:
    """Everything of the graph but content: what both folds must agree on."""
    items = [
        (i.id, i.scope, i.kind, i.author, tuple(sorted(i.content)), i.authority, i.parents)
        for i in state.graph.items.values()
    ]
    edges = [(e.edge_id, e.from_, e.to, e.kind) for e in state.graph.edges.values()]
    return [tuple(items), tuple(edges), tuple(state.rejections)]


class _Every(set[str]):
    """A set that holds every item: each counts as one whose values are wrapped."""

    def __contains__(self, item: object) -> bool:
        return True


@pytest.mark.parametrize("written_before", [False, True], ids=["now", "wrapped-form-items"])
def test_a_fold_without_keys_decides_as_a_reader_does(
    log_dir: Path, written_before: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An import compares items: identical ones are skipped, different ones re-id'd. The
    # projector compares sealed values, a reader plaintexts; both must decide alike.
    # `written_before`: the items were created as before 7 December, their values in
    # the wrapped form (``msenc1``); what a later process seals for them must compare
    # with those alike.
    with monkeypatch.context() as patch, MemexStore.open(str(log_dir)) as store:
        if written_before:
            patch.setattr(HeldKeys, "wrapped_items", property(lambda self: _Every()))
        a = _item(store, "ana", {"text": CARD, "n": 1})
        b = _item(store, "ana", {"text": ADDRESS})
        c = _item(store, "bob", {"text": TEA})
    form = "msenc1:" if written_before else "msenc3:"
    assert all(v.startswith(form) for _, data in _stored(log_dir) for v in _values(data))
    with MemexStore.open(str(log_dir)) as store:  # a process of today, opening the log
        store.update(b.id, {"content": {"n": 2}}, author="agent:a")
        # the update's value takes the form of the item's values
        assert [v[:7] for v in _values(_stored(log_dir)[-1][1])] == [form]
        exported = store.export_slice(memory_ids=[a.id, b.id, c.id]).model_dump(mode="json")
        for memory in exported["memories"]:
            if memory["id"] == c.id:
                memory["content"]["text"] = "bob now likes coffee"  # different: re-id'd
        report = store.import_slice(
            exported,
            skip_existing_ids=True,
            shallow_compare_existing=True,
            re_id_on_difference=True,
        )
        reader_state = store.state()
    assert len(reader_state.graph.items) == 4, report  # a and b skipped, c re-id'd
    keyless = _keyless(log_dir)
    assert _shape(keyless) == _shape(reader_state)
    # The keyless state holds sealed values only.
    assert all(parse(v).key_id for i in keyless.graph.items.values() for v in i.content.values())


def _graph_receipt(payload: dict[str, Any]) -> GraphEnvelope:
    return GraphEnvelope(
        id="forged-1",
        namespace=OPERATION_NAMESPACE,
        type=ERASE_CONTENT,
        ts="2026-12-04T10:00:00.000Z",
        payload=payload,
    )


def test_a_graph_receipt_that_does_not_tell_the_truth_is_refused(log_dir: Path) -> None:
    with MemexStore.open(str(log_dir)) as store, Memory(log_dir) as memory:
        item = _item(store, "ana", {"text": CARD})
        other = _item(store, "bob", {"text": TEA})
        stored = _stored(log_dir)
        leaf = leaf_hash(stored[0][1]).hex()
        payload = {"subject": "ana", "items": [item.id], "seqs": [0], "leaf_hashes": [leaf]}
        payload["reason"] = "forged"
        cases = [
            (payload, "holds no content sealed under a destroyed key"),
            ({**payload, "leaf_hashes": ["0" * 64]}, "is not the leaf hash of seq 0"),
            ({**payload, "seqs": [7]}, "seq 7 is not in the log"),
            ({**payload, "items": "nope"}, "items"),
        ]
        for forged, why in cases:
            with pytest.raises(ValueError, match=why):
                memory.log.append([_graph_receipt(forged)])
        assert _stored(log_dir) == stored
        # A true erasure of bob, then a receipt naming ana's item in bob's record: refused.
        memory.erase("bob", "asked")
        stored = _stored(log_dir)
        lie = {**payload, "items": [item.id], "seqs": [1]}
        lie["leaf_hashes"] = [leaf_hash(stored[1][1]).hex()]
        with pytest.raises(ValueError, match=f"item {item.id} has no content sealed"):
            memory.log.append([_graph_receipt(lie)])
        assert _stored(log_dir) == stored
        assert store.item(item.id).content == {"text": CARD}  # type: ignore[union-attr]
        assert store.item(other.id).content == {"text": ERASED}  # type: ignore[union-attr]


def test_a_graph_receipt_on_a_log_without_encryption_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain"
    with MemexStore.open(str(path)) as store, Memory(path) as memory:
        item = _item(store, "ana", {"text": CARD})
        leaf = leaf_hash(_stored(path)[0][1]).hex()
        payload = {"subject": "ana", "items": [item.id], "seqs": [0], "leaf_hashes": [leaf]}
        with pytest.raises(EncryptionError, match="this log is not encrypted"):
            memory.log.append([_graph_receipt({**payload, "reason": "r"})])
        assert len(_stored(path)) == 1
        assert store.item(item.id).content == {"text": CARD}  # type: ignore[union-attr]


def test_the_derived_memex_topic_gets_the_erasure_as_an_update(log_dir: Path) -> None:
    # What the projector publishes to LOG.memex for the receipt's graph half: the seed's
    # own memory.update, every content value "[erased]".
    with MemexStore.open(str(log_dir)) as store, Memory(log_dir) as memory:
        item = _item(store, "ana", {"text": CARD, "n": 1})
        memory.erase("ana", "asked")
    state = empty_state()
    envelopes: list[dict[str, Any]] = []
    for seq, data in _stored(log_dir):
        before = state
        state, lifecycle = fold_record(state, seq, data, erasable=True)
        envelopes = memex_envelopes(before, state, seq, decode_record(data), lifecycle)
    assert [(e["type"], e["payload"]["item_id"]) for e in envelopes] == [("memory.update", item.id)]
    assert envelopes[0]["payload"]["partial"]["content"] == {"text": ERASED, "n": ERASED}


def test_an_erasure_keeps_import_decisions_and_erases_re_ided_copies(log_dir: Path) -> None:
    # An import re-id'd a changed copy of ana's item (its content sealed under ana's key).
    # After the erasure: the copy is erased too; a reader folding the log afresh decides the
    # import as before (its sealed values compared, their key gone), so live and fresh
    # readers and the keyless fold hold the same items.
    memory = Memory(log_dir)
    store = MemexStore(backend=LogGraphs(memory.log))
    card = _item(store, "ana", {"text": CARD})
    exported = store.export_slice(memory_ids=[card.id]).model_dump(mode="json")
    exported["memories"][0]["content"]["text"] = ADDRESS
    report = store.import_slice(
        exported, skip_existing_ids=True, shallow_compare_existing=True, re_id_on_difference=True
    )
    [copy] = [i for i in report.created.memories if i != card.id]
    assert store.item(copy).content == {"text": ADDRESS}  # type: ignore[union-attr]
    live = MemexStore.open(str(log_dir))
    assert live.item(copy).content == {"text": ADDRESS}  # type: ignore[union-attr]

    receipt = memory.erase("ana", "asked")
    assert isinstance(receipt, GraphErasure) and set(receipt.items) == {card.id, copy}
    fresh = MemexStore.open(str(log_dir))
    for reader in (store, live, fresh):
        assert set(reader.state().graph.items) == {card.id, copy}
        assert reader.item(copy).content == {"text": ERASED}  # type: ignore[union-attr]
        assert reader.item(card.id).content == {"text": ERASED}  # type: ignore[union-attr]
        assert "Quelconque" not in reader.dumps() and "4111" not in reader.dumps()
    assert _shape(_keyless(log_dir)) == _shape(fresh.state())
    for reader in (live, fresh):
        reader.close()
    memory.close()


def test_content_whose_key_is_gone_without_a_receipt_is_named_by_the_next_erase(
    log_dir: Path,
) -> None:
    # What a Kafka erase that failed between destroying the key and appending the receipt
    # leaves: ana's key gone, no receipt. A reader shows the sealed text (never plaintext);
    # the next erase of ana names the item, and it reads "[erased]".
    with MemexStore.open(str(log_dir)) as store:
        item = _item(store, "ana", {"text": CARD})
    with Memory(log_dir) as memory:
        keys = memory.log.keys  # type: ignore[attr-defined]
        gone = keys.shared_key_id("ana")

        def destroy(state: LogState) -> tuple[list[Any], None]:
            assert keys.delete([gone]) == 1
            return [], None

        memory.log.transact(destroy)
    with Memory(log_dir) as memory:
        store = MemexStore(backend=LogGraphs(memory.log))
        text = store.item(item.id).content["text"]  # type: ignore[index]
        assert parse(text).key_id == gone and "4111" not in text
        receipt = memory.erase("ana", "asked again")
        assert isinstance(receipt, GraphErasure) and receipt.items == (item.id,)
        assert store.item(item.id).content == {"text": ERASED}  # type: ignore[union-attr]


def test_text_that_only_looks_sealed_does_not_stop_an_erase(log_dir: Path) -> None:
    # A user's values that look like sealed text: malformed, or a copy of another
    # subject's sealed value (its key alive). Neither makes the erase fail or reach bob.
    with MemexStore.open(str(log_dir)) as store, Memory(log_dir) as memory:
        bobs = _item(store, "bob", {"text": TEA})
        copied = decode_record(_stored(log_dir)[0][1]).payload["item"]["content"]["text"]  # type: ignore[union-attr]
        item = _item(store, "ana", {"a": "msenc1:not-sealed", "b": copied, "c": CARD})
        receipt = memory.erase("ana", "asked")
        assert isinstance(receipt, GraphErasure) and receipt.items == (item.id,)
        assert store.item(item.id).content == dict.fromkeys("abc", ERASED)  # type: ignore[union-attr]
        assert store.item(bobs.id).content == {"text": TEA}  # type: ignore[union-attr]


def test_a_changed_byte_in_sealed_graph_content_is_corruption(log_dir: Path) -> None:
    # Someone who can write the file changes one character of a sealed value: every reader
    # refuses the log, naming the record, rather than serving altered content.
    with MemexStore.open(str(log_dir)) as store:
        _item(store, "ana", {"text": CARD})
    conn = sqlite3.connect(log_dir / LOG_FILE)
    data = conn.execute("SELECT record FROM events WHERE seq = 0").fetchone()[0]
    stored = decode_record(data)
    assert isinstance(stored, GraphEnvelope)
    # Moved to another item, a sealed value does not open (it is bound to its item).
    moved = {**stored.payload, "item": {**stored.payload["item"], "id": "another-item"}}
    with Memory(log_dir, create=False) as reader, pytest.raises(SealedError, match="not open"):
        open_record(reader.log.keys, stored.model_copy(update={"payload": moved}))  # type: ignore[attr-defined]
    _change_sealed(conn, data, stored.payload["item"]["content"]["text"])
    with pytest.raises(CorruptLogError, match="seq 0: the sealed content does not open"):
        MemexStore.open(str(log_dir))
