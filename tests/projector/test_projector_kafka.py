"""The distributed log against the real Kafka and Redis: concurrency, crashes, flushes,
garbage, time travel and subscriptions (invariants 8 to 12)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from memstream import Memory, Message, Recall
from producers.logs.base import fold_lifecycle
from producers.logs.kafka_client import (
    SEQ_HEADER,
    TopicConfigError,
    consumer_conf,
    ensure_topic,
)
from producers.logs.location import KafkaLocation, parse_kafka_location
from producers.memex_store import MemexStore
from projector.record_fold import LogState, fold_log
from projector.service import Projector
from projector.snapshot_store import SnapshotStore
from schemas.codec import MAGIC, decode_record, encode_record
from schemas.graph.envelopes import now_iso
from schemas.graph.ids import uuid7
from schemas.records import GraphEnvelope

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def location(kafka_bootstrap: str, redis_url: str, unique_name: str) -> str:
    return f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, bytes, dict[str, bytes]]]:
    """Every record of a one-partition topic: (offset, value, headers).

    The log's offsets are dense; the lifecycle and derived (memex) topics are written in
    transactions, whose commit markers take offsets, so they are read to their end
    (committed records only)."""
    consumer = Consumer(
        consumer_conf(
            bootstrap, **{"enable.partition.eof": True, "isolation.level": "read_committed"}
        )
    )
    tp = TopicPartition(topic, 0)
    _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + 60
    at_end = high == 0
    while not at_end and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=0.5):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end = message.offset() >= high
                continue
            assert error is None, error
            out.append((message.offset(), message.value(), dict(message.headers() or [])))
    consumer.close()
    assert at_end
    if not topic.endswith((".lifecycle", ".memex")):
        assert len(out) == high
    return out


def clean_fold(loc: KafkaLocation) -> LogState:
    return fold_log((seq, value) for seq, value, _ in read_topic(loc.bootstrap, loc.topic))


def raw_produce(loc: KafkaLocation, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": loc.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for value in values:
        producer.produce(loc.topic, value, partition=0)
    assert producer.flush(30) == 0


def _agent(location: str, agent: int, count: int, out: Any) -> None:
    acked: list[tuple[str, int]] = []
    with Memory(location) as memory:
        first = memory.add_message(Message(speaker=f"agent{agent}", content="hello"))
        acked.append((str(first.id), first.seq))  # type: ignore[arg-type]
        for start in range(1, count, 50):
            batch = [
                Message(speaker=f"agent{agent}", content=f"m{agent}-{i}")
                for i in range(start, min(start + 50, count))
            ]
            if start % 100 == 1:
                stored = memory.append_many(batch)
            else:
                futures = [memory.publish_async(m) for m in batch]
                stored = [f.result() for f in futures]
            acked.extend((str(e.id), e.seq) for e in stored)  # type: ignore[misc]
        recall = memory.record_recall(Recall(query="q", recalled=(first.id,)))
        acked.append((str(recall.id), recall.seq))  # type: ignore[arg-type]
    out.put((agent, acked))


def test_eight_agent_processes_append_at_once(location: str) -> None:
    loc = parse_kafka_location(location)
    with Memory(location):  # create the topic once
        pass
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    agents = [ctx.Process(target=_agent, args=(location, a, 400, out)) for a in range(8)]
    for p in agents:
        p.start()
    results = dict(out.get(timeout=240) for _ in agents)
    for p in agents:
        p.join(60)
        assert p.exitcode == 0
    acked = [pair for pairs in results.values() for pair in pairs]
    assert len(acked) == 8 * 401
    state = clean_fold(loc)
    seqs = sorted(seq for _, seq in acked)
    assert seqs == list(range(len(acked)))  # dense, each acknowledged event once
    assert state.last_seq == len(acked) - 1 and not state.rejections
    by_id = {str(e.id): e.seq for e in state.memory.events}
    assert by_id == dict(acked)
    projector = Projector(loc)
    assert projector.run(until_caught_up=True) == state
    assert SnapshotStore.connect(loc).load() == state


def _projector_process(location: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memstream",
            "projector",
            "run",
            "--log",
            location,
            "--snapshot-ms",
            "30",
            "--snapshot-records",
            "300",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _graph_env(payload: dict[str, Any]) -> GraphEnvelope:
    return GraphEnvelope(
        id=uuid7(),
        namespace=payload["type"].split(".")[0],
        type=payload["type"],
        ts=now_iso(),
        payload=payload,
    )


def _lifecycle_of(loc: KafkaLocation) -> list[tuple[int, bytes]]:
    return [(int(h[SEQ_HEADER]), v) for _, v, h in read_topic(loc.bootstrap, loc.lifecycle_topic)]


def test_projector_killed_and_restarted_equals_an_uninterrupted_run(location: str) -> None:
    loc = parse_kafka_location(location)
    stop = threading.Event()
    store_errors: list[BaseException] = []

    def write() -> None:
        try:
            with Memory(location) as memory, MemexStore.open(location) as store:
                i = 0
                while not stop.is_set() and i < 3000:
                    memory.append_many(
                        [Message(speaker="w", content=f"m{i}-{k}") for k in range(20)]
                    )
                    store.create(
                        id=f"item{i}",
                        scope="s",
                        kind="k",
                        content={"i": i},
                        author="w",
                        source_kind="observed",
                        authority=0.5,
                    )
                    if i % 7 == 3:
                        store.retract(f"item{i - 2}", "w")
                    i += 1
        except BaseException as exc:  # surfaced below
            store_errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(4):
            process = _projector_process(location)
            time.sleep(random.uniform(1.5, 3.0))
            process.send_signal(signal.SIGKILL)
            process.wait(30)
    finally:
        stop.set()
        writer.join(60)
    assert not store_errors, store_errors
    # A garbage record in the middle, then the final run up to the end.
    raw_produce(loc, [b"garbage"])
    final = Projector(loc)
    state = final.run(until_caught_up=True)
    clean = clean_fold(loc)
    assert state == clean
    assert SnapshotStore.connect(loc).load() == clean
    log_records = [(seq, value) for seq, value, _ in read_topic(loc.bootstrap, loc.topic)]
    expected = [(r.seq, encode_record(r.envelope)) for r in fold_lifecycle(iter(log_records))]
    assert _lifecycle_of(loc) == expected  # each record's events once, in order


def test_a_projector_ahead_of_the_broker_waits_and_still_publishes_each_event_once(
    location: str,
) -> None:
    """A commit waits for every lifecycle event produced; a transaction open longer than
    its timeout fences the producer. A catch-up that ran ahead of the broker was fenced
    three times in one run. The loop now waits while more than `max_undelivered` events
    are unacknowledged: at 0 it waits after every round, and still publishes every
    record's events once, in order (fails without the wait: none is ever made)."""
    loc = parse_kafka_location(location)
    with Memory(location) as memory:
        for i in range(0, 6000, 500):
            memory.append_many([Message(speaker="w", content=f"m{i + k}") for k in range(500)])
    projector = Projector(loc, max_undelivered=0)
    state = projector.run(until_caught_up=True)
    assert state == clean_fold(loc)
    assert projector.stats.restarts == 0
    assert projector.stats.backpressure_s > 0
    # What was counted before each wait: at most one consumed batch's events (one each).
    assert 0 < projector.stats.most_undelivered <= 1000
    log_records = [(seq, value) for seq, value, _ in read_topic(loc.bootstrap, loc.topic)]
    expected = [(r.seq, encode_record(r.envelope)) for r in fold_lifecycle(iter(log_records))]
    assert _lifecycle_of(loc) == expected


def test_a_negative_max_undelivered_is_refused_before_anything_is_touched() -> None:
    """No count of undelivered events is below a negative bound: the loop would wait for
    ever. Refused at once, naming the argument (no broker is asked: none listens here)."""
    with pytest.raises(ValueError, match="max_undelivered must be 0 or more, got -1"):
        Projector("kafka://127.0.0.1:9/nowhere?redis=redis://127.0.0.1:9/0", max_undelivered=-1)


def test_redis_flushed_while_running_is_rebuilt_and_never_wrong(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    isolated = redis_url.rsplit("/", 1)[0] + "/15"  # FLUSHDB touches only this test's db
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={isolated}"
    loc = parse_kafka_location(location)
    client = redis.Redis.from_url(isolated)
    Memory(location).close()  # a writer creates the log; the projector only reads it
    stop = threading.Event()
    projector = Projector(loc, every_ms=20, every_records=200)
    runner = threading.Thread(target=projector.run, args=(stop,))
    runner.start()
    try:
        with Memory(location) as memory:
            for round_ in range(6):
                memory.append_many(
                    [Message(speaker="w", content=f"r{round_}-{k}") for k in range(500)]
                )
                time.sleep(0.2)
                if round_ in (2, 4):
                    client.flushdb()
                # A reader opened at any moment answers exactly the log's fold.
                with Memory(location) as reader:
                    mine = reader.log.state()
                    assert mine == fold_log(
                        (s, v)
                        for s, v, _ in read_topic(loc.bootstrap, loc.topic)
                        if s <= (mine.last_seq or -1)
                    )
                    assert len(reader) == 500 * (round_ + 1)
        deadline = time.monotonic() + 60
        clean = clean_fold(loc)
        while time.monotonic() < deadline:
            loaded = SnapshotStore.connect(loc).load()
            if loaded is not None and loaded.last_seq == clean.last_seq:
                break
            time.sleep(0.1)
        assert loaded == clean
        assert projector.stats.rebuilds >= 1
    finally:
        stop.set()
        runner.join(60)
        client.flushdb()


def test_garbage_unknown_schemas_and_invalid_commands_are_rejections(location: str) -> None:
    loc = parse_kafka_location(location)
    with Memory(location) as memory, MemexStore.open(location) as store:
        first = memory.add_message(Message(speaker="a", content="kept"))
        store.create(
            id="x",
            scope="s",
            kind="k",
            content={},
            author="a",
            source_kind="observed",
            authority=1.0,
        )
        bad = [
            b"garbage bytes",
            MAGIC + b"\x07" * 8 + b"a record of a schema nobody registered",
            b'{"id": "e", "namespace": "memory", "type": "memory.create"',
            encode_record(_graph_env({"type": "memory.retract", "item_id": "nope", "author": "a"})),
            encode_record(
                _graph_env(
                    {
                        "type": "memory.create",
                        "item": {
                            "id": "x",
                            "scope": "s",
                            "kind": "k",
                            "content": {},
                            "author": "a",
                            "source_kind": "observed",
                            "authority": 1.0,
                        },
                    }
                )
            ),  # duplicate id
            encode_record(
                _graph_env(
                    {
                        "type": "memory.create",
                        "item": {
                            "id": "y",
                            "scope": "s",
                            "kind": "k",
                            "content": {},
                            "author": "a",
                            "source_kind": "observed",
                            "authority": 3.0,
                        },
                    }
                )
            ),  # out of range
            encode_record(_graph_env({"type": "task.complete", "task_id": "none"})),
            encode_record(Message(speaker="a", content="kept")).replace(
                b"kept", b"\xff\xfe\xfd\xfc"
            ),
            encode_record(first.model_copy(update={"seq": None})),  # the same event again
        ]
        raw_produce(loc, bad)
        after = memory.add_message(Message(speaker="a", content="after"))
        assert after.seq == 2 + len(bad)
        assert len(memory) == 2
        assert [i.id for i in store.items()] == ["x"]
    projector = Projector(loc)
    state = projector.run(until_caught_up=True)
    assert [r.seq for r in state.rejections] == list(range(2, 2 + len(bad)))
    assert all(r.reason for r in state.rejections)
    assert [e.content for e in state.memory.events] == ["kept", "after"]
    assert list(state.graph.items) == ["x"]
    rejected = [
        r for r in Memory(location).lifecycle(0, timeout=1) if r.envelope.type == "record.rejected"
    ]
    assert [r.seq for r in rejected] == list(range(2, 2 + len(bad)))


def test_replay_up_to_seq_equals_the_fold_of_the_prefix(location: str) -> None:
    loc = parse_kafka_location(location)
    with Memory(location) as memory, MemexStore.open(location) as store:
        for i in range(300):
            stored = memory.add_message(Message(speaker="a", content=f"word{i % 7} n{i}"))
            if i % 10 == 0:
                memory.delete([stored.id], "r")
            if i % 25 == 0:
                store.create(
                    id=f"g{i}",
                    scope="s",
                    kind="k",
                    content={},
                    author="a",
                    source_kind="observed",
                    authority=0.4,
                )
    Projector(loc, every_records=97).run(until_caught_up=True)
    records = [(s, v) for s, v, _ in read_topic(loc.bootstrap, loc.topic)]
    snapshots = SnapshotStore.connect(loc)
    with Memory(location) as memory:
        for k in (0, 1, 57, 96, 97, 200, len(records) - 1):
            prefix = fold_log(records[: k + 1])
            assert memory.replay(up_to_seq=k) == prefix.memory
            assert memory.replay(up_to_seq=k).events == prefix.memory.events
            partial = snapshots.load(up_to_seq=k)
            assert partial == prefix


def test_a_subscriber_from_an_offset_sees_every_later_event_in_order(location: str) -> None:
    with Memory(location) as memory:
        memory.append_many([Message(speaker="a", content=f"before {i}") for i in range(50)])
        seen: list[Any] = []
        stop = threading.Event()

        def follow() -> None:
            with Memory(location) as reader:
                for event in reader.subscribe(from_seq=20, stop=stop, timeout=20):
                    seen.append(event)
                    if len(seen) == 30 + 100:
                        return

        thread = threading.Thread(target=follow)
        thread.start()
        for i in range(100):
            memory.publish_async(Message(speaker="b", content=f"after {i}"))
        memory.flush()
        thread.join(30)
        stop.set()
        assert [e.seq for e in seen] == list(range(20, 150))
        assert seen == memory.events(after_seq=19)
    Projector(parse_kafka_location(location)).run(until_caught_up=True)
    with Memory(location) as memory:
        lifecycle = list(memory.lifecycle(140, timeout=2))
        assert [r.seq for r in lifecycle] == list(range(140, 150))
        assert {r.envelope.type for r in lifecycle} == {"message.appended"}


def test_a_topic_with_two_partitions_or_compaction_is_refused(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    two, compacted = f"{unique_name}-two", f"{unique_name}-compact"
    futures = admin.create_topics(
        [
            NewTopic(two, num_partitions=2, replication_factor=1),
            NewTopic(
                compacted,
                num_partitions=1,
                replication_factor=1,
                config={"cleanup.policy": "compact"},
            ),
        ]
    )
    for future in futures.values():
        future.result(30)
    with pytest.raises(TopicConfigError, match="2 partitions"):
        ensure_topic(admin, two, 1)
    with pytest.raises(TopicConfigError, match="compact"):
        Memory(f"kafka://{kafka_bootstrap}/{compacted}?redis={redis_url}")


def test_a_record_whose_lifecycle_event_is_five_times_its_size_is_published(
    location: str,
) -> None:
    """A record near the size limit made of control characters: its Avro strings hold one
    byte each, its lifecycle event's JSON six. The projector published nothing of it before
    (MSG_SIZE_TOO_LARGE, ended its tenure, again and again); the derived topics now take
    such events, and raise a lifecycle topic created with Kafka's default limit."""
    loc = parse_kafka_location(location)
    admin = AdminClient({"bootstrap.servers": loc.bootstrap})
    ensure_topic(admin, loc.lifecycle_topic, 1)  # as an older projector made it
    content = "\x01" * 900_000
    with Memory(location) as memory:
        stored = memory.add_message(Message(speaker="a", content=content))
        after = memory.add_message(Message(speaker="a", content="after"))
    state = Projector(loc).run(until_caught_up=True, max_seconds=60)
    assert state.last_seq == after.seq
    lifecycle = _lifecycle_of(loc)
    assert [seq for seq, _ in lifecycle] == [stored.seq, after.seq]
    big = lifecycle[0][1]
    assert len(big) > 5_000_000
    assert decode_record(big).payload["event"]["content"] == content  # type: ignore[union-attr]


def _every_header(bootstrap: str, topic: str) -> list[dict[str, bytes]]:
    """The headers of every record of a one-partition topic, aborted ones included."""
    consumer = Consumer(
        consumer_conf(
            bootstrap, **{"enable.partition.eof": True, "isolation.level": "read_uncommitted"}
        )
    )
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[dict[str, bytes]] = []
    deadline = time.monotonic() + 60
    at_end = high == 0
    while not at_end and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=0.5):
            error = message.error()
            if error is not None:
                at_end = error.code() == KafkaError._PARTITION_EOF and message.offset() >= high
                continue
            out.append(dict(message.headers() or []))
    consumer.close()
    assert at_end, f"{topic}: not read to its end"
    return out


def test_each_tenure_first_aborts_a_sweep_record_on_the_topics_it_publishes_to(
    location: str,
) -> None:
    """A tenure's first transaction writes one record to the lifecycle topic and to the
    derived topic, then aborts: its marker ends any record an earlier epoch left open
    (one that reached a stalled broker late would otherwise be committed by the next
    commit, beside its event published again). No committed reader sees a sweep record;
    every event is still published once."""
    loc = parse_kafka_location(location)
    with Memory(location) as memory:
        memory.append_many([Message(speaker="a", content=f"m{i}") for i in range(5)])
    Projector(loc).run(until_caught_up=True)
    with Memory(location) as memory:
        memory.add_message(Message(speaker="a", content="after"))
    Projector(loc).run(until_caught_up=True)
    for topic in (loc.lifecycle_topic, f"{loc.topic}.memex"):
        kinds = [h.get("memstream.kind") for h in _every_header(loc.bootstrap, topic)]
        assert kinds.count(b"sweep") == 2, (topic, kinds)  # one a tenure, aborted
        committed = [h.get("memstream.kind") for _, _, h in read_topic(loc.bootstrap, topic)]
        assert b"sweep" not in committed, (topic, committed)
    seqs = [int(h["memstream.seq"]) for _, _, h in read_topic(loc.bootstrap, loc.lifecycle_topic)]
    assert sorted(seqs) == list(range(6))  # each message's one event, once


def test_a_sweep_fenced_by_a_successor_ends_the_tenure(location: str) -> None:
    """A successor's producer fences this one while it sweeps: confluent-kafka raises the
    fatal error from flush and the delivery callback it runs next fails with a SystemError
    chained to it. The tenure ends as for any fenced producer (the group then stops the
    projector), rather than as a crash."""
    from producers.logs.kafka_client import producer_conf
    from projector.service import _Acks, _EndTenure

    loc = parse_kafka_location(location)
    with Memory(location) as memory:
        memory.add_message(Message(speaker="a", content="one"))
    projector = Projector(loc)
    Projector(loc).run(until_caught_up=True)  # the lifecycle and derived topics, in use
    acks = _Acks(loc.lifecycle_topic)

    def producer() -> Producer:
        conf = {"on_delivery": acks.report, "transactional.id": projector.transactional_id}
        made = Producer(producer_conf(loc.bootstrap, **conf))
        made.init_transactions(30)
        return made

    mine = producer()
    projector._sweep(mine, acks)  # a sweep of its own tenure
    producer()  # a successor: fences `mine`
    with pytest.raises(_EndTenure, match="another projector took over the log"):
        projector._sweep(mine, acks)


def test_a_fatal_error_lost_by_a_delivery_callback_is_asked_of_the_producer_again(
    location: str,
) -> None:
    """How the delivery callback run after a fatal error fails depends on CPython's
    specialised bytecode: in a long test run the SystemError came without its cause (the
    test above then crashed instead of ending the tenure). The producer is asked again."""
    from producers.logs.kafka_client import kafka_exception, producer_conf

    loc = parse_kafka_location(location)
    with Memory(location) as memory:
        memory.add_message(Message(speaker="a", content="one"))
    txn_id = f"{loc.topic}-probe"

    def producer() -> Producer:
        made = Producer(producer_conf(loc.bootstrap, **{"transactional.id": txn_id}))
        made.init_transactions(30)
        return made

    lost = SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL")
    healthy = producer()
    healthy.begin_transaction()
    assert kafka_exception(lost, healthy) is None  # not fatal: its transaction aborted
    healthy.begin_transaction()  # and a new one can begin
    healthy.produce(loc.topic, b"", partition=0)
    producer()  # a successor: fences `healthy`
    with contextlib.suppress(KafkaException):  # the fatal error, raised once (or lost)
        healthy.flush(30)
    fatal = kafka_exception(lost, healthy)
    assert fatal is not None and fatal.args[0].code() == KafkaError._FENCED
    assert kafka_exception(lost) is None  # without a producer to ask: unknown
