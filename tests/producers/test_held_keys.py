"""Keys made ahead (`producers.keys.held_keys`): well formed, each its own, usable at once."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from producers.keys.held_keys import AHEAD_MAX, UNASSIGNED, HeldKeys
from schemas.crypto.envelope import KEY_BYTES, open_sealed, parse, seal


def test_batches_double_up_to_the_most_and_hold_distinct_well_formed_keys() -> None:
    held = HeldKeys()
    sizes, ids, keys = [], [], []
    for _ in range(9):
        batch = held._next_batch()
        sizes.append(len(batch))
        ids += [key_id for key_id, _ in batch]
        keys += [key for _, key in batch]
    assert sizes == [1, 2, 4, 8, 16, 32, 64, AHEAD_MAX, AHEAD_MAX]
    # 12 hex digits of time, 20 random ones: what a key id is everywhere (`new_key_id`)
    assert all(re.fullmatch(r"[0-9a-f]{32}", key_id) for key_id in ids)
    assert all(len(key) == KEY_BYTES for key in keys)
    assert len(set(ids)) == len(ids) and len(set(keys)) == len(keys)
    # one read of the random source per batch: the id and key parts do not overlap
    assert not {key_id[12:] for key_id in ids} & {key[:10].hex() for key in keys}


def test_a_store_sets_its_own_largest_batch() -> None:
    """The Kafka store makes larger batches than the embedded one (`ahead_max`)."""
    from producers.keys.kafka_keys import KafkaKeyStore

    class Small(HeldKeys):
        ahead_max = 4

    small = Small()
    assert [len(small._next_batch()) for _ in range(5)] == [1, 2, 4, 4, 4]
    assert KafkaKeyStore.ahead_max > AHEAD_MAX == HeldKeys.ahead_max


def test_a_key_taken_ahead_comes_with_the_context_of_that_key() -> None:
    held = HeldKeys()
    batch = held._next_batch() + held._next_batch()
    held._made_ahead(batch)
    event = uuid.uuid4()
    taken = []
    while (found := held._take_ahead()) is not None:
        key_id, key, context = found
        token = seal(
            "card 4111", event_id=event, field="content", key_id=key_id, key=key, context=context
        )
        assert open_sealed(parse(token), event_id=event, field="content", key=key) == "card 4111"
        taken.append(key_id)
    assert taken == [key_id for key_id, _ in batch]  # first made, first used
    assert all(held._by_id[key_id].subject == UNASSIGNED for key_id in taken)


def test_keys_of_single_events_are_not_kept_by_a_writer_or_a_reader(tmp_path: Path) -> None:
    """A key of one event seals once; kept with its AES-GCM context (about 1.3 KB), they
    grew an embedded writer, and a reader of its log, by about 1.6 KB an event. Held now:
    at most the keys made ahead and not used yet, and subjects' shared keys."""
    from memstream import Memory, Message

    count = 3 * AHEAD_MAX
    with Memory(tmp_path / "log", encrypt=True) as memory:
        written = [
            memory.add_message(Message(speaker="a", content=f"note {i}")) for i in range(count)
        ]
        memory.add_message(Message(speaker="a", content="in a session", session_id="s1"))
        keys = memory.log.keys  # type: ignore[attr-defined]
        assert len(keys._by_id) <= AHEAD_MAX + 1 and len(keys._contexts) <= AHEAD_MAX + 1
    with Memory(tmp_path / "log", create=False) as reader:
        assert [reader.get(e.id).content for e in written] == [f"note {i}" for i in range(count)]
        keys = reader.log.keys  # type: ignore[attr-defined]
        assert len(keys._by_id) <= 1 and len(keys._contexts) <= 1  # the session's key
