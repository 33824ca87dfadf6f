"""Issue 11, item 14: the shared lifecycle reader serves every subscriber exactly the stream.

A real embedded log and a real `LogHandle`; the hub is driven through `hub_stream`, the
body of each SSE response, with a ring and rider buffers made tiny so that subscribers
fall out of the ring, ride replay trains, stall and board again. Each must still get the
lifecycle stream exactly (offsets in order, nothing missed, nothing twice, the frames
`Memory.lifecycle` gives), and the log must be read by at most two readers at any time.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from producers.memory import Memory
from queryd.daemon.handles import LogHandle
from queryd.daemon.lifecycle import sse_frame
from queryd.daemon.streams import HubSettings, hub_stream
from schemas.audit import Message

TINY = HubSettings(
    ring_frames=20,
    ring_bytes=10**7,
    rider_bytes=2_000,
    stall_timeout=0.2,
    batch_frames=5,
    batch_bytes=10**6,
)


def frames_of(chunks: list[str]) -> list[tuple[int, str]]:
    """(id, whole frame) of every event frame in an SSE body."""
    out = []
    for block in "".join(chunks).split("\n\n"):
        if block.startswith("id: "):
            out.append((int(block.split("\n", 1)[0][4:]), block + "\n\n"))
    return out


def readers() -> int:
    return sum(t.name.startswith("memstream-lifecycle-") for t in threading.enumerate())


def test_every_subscriber_gets_the_exact_stream_from_one_shared_reader(
    embedded_location: str,
) -> None:
    with Memory(embedded_location) as writer:
        writer.append_many(Message(speaker="u", content=f"event {i}") for i in range(300))
        writer.delete(writer.events()[7].id, "asked")
        expected = [sse_frame(r) for r in writer.lifecycle(0, timeout=0.3)]
    assert len(expected) == 301
    handle = LogHandle(embedded_location, poll_interval=0.01)
    most_readers = 0

    async def main() -> list[list[tuple[int, str]]]:
        nonlocal most_readers
        handle.start(asyncio.get_running_loop())
        while not handle.ready.is_set():
            await asyncio.sleep(0.02)
        hub = handle.lifecycle_hub(TINY)

        async def consume(start: int, n: int, pause_at: int | None = None) -> list[Any]:
            nonlocal most_readers
            chunks: list[str] = []
            seen = 0
            async for chunk in hub_stream(hub, start, limit=n, keepalive=0.5):
                chunks.append(chunk)
                seen += chunk.count("id: ")
                most_readers = max(most_readers, readers())
                if pause_at is not None and seen >= pause_at:
                    pause_at = None
                    await asyncio.sleep(1.0)  # a client that stops reading for a while
            return frames_of(chunks)

        return await asyncio.wait_for(
            asyncio.gather(
                consume(0, 301),
                consume(0, 301, pause_at=10),
                consume(0, 301, pause_at=150),
                consume(150, 100),
                consume(290, 11),
                consume(300, 1),
            ),
            60,
        )

    try:
        results = asyncio.run(main())
    finally:
        hub = handle.hub
        trains, stalls = (hub.trains, hub.stalls) if hub is not None else (0, 0)
        handle.stop()
    starts = [0, 0, 0, 150, 290, 300]
    for start, got in zip(starts, results, strict=True):
        offsets = [offset for offset, _ in got]
        end = start + len(got)
        assert offsets == list(range(start, end)), (start, offsets[:20])
        assert [frame for _, frame in got] == expected[start:end]
    assert [len(g) for g in results] == [301, 301, 301, 100, 11, 1]
    assert trains >= 1 and stalls >= 1, (trains, stalls)  # the replay paths were taken
    assert most_readers <= 2, most_readers


def test_a_subscriber_at_the_end_gets_new_events_as_they_are_appended(
    embedded_location: str,
) -> None:
    with Memory(embedded_location) as writer:
        writer.append_many(Message(speaker="u", content=f"e{i}") for i in range(50))
        handle = LogHandle(embedded_location, poll_interval=0.01)

        async def main() -> list[tuple[int, str]]:
            handle.start(asyncio.get_running_loop())
            while not handle.ready.is_set():
                await asyncio.sleep(0.02)
            hub = handle.lifecycle_hub(TINY)
            chunks: list[str] = []

            async def read() -> None:
                async for chunk in hub_stream(hub, 50, limit=2, keepalive=0.2):
                    chunks.append(chunk)

            task = asyncio.create_task(read())
            await asyncio.sleep(0.5)
            await asyncio.to_thread(writer.add_message, Message(speaker="u", content="new 1"))
            await asyncio.to_thread(writer.add_message, Message(speaker="u", content="new 2"))
            await asyncio.wait_for(task, 10)
            return frames_of(chunks)

        try:
            got = asyncio.run(main())
        finally:
            handle.stop()
    assert [offset for offset, _ in got] == [50, 51]
    datas = [json.loads(frame.split("data: ", 1)[1]) for _, frame in got]
    assert [d["envelope"]["payload"]["event"]["content"] for d in datas] == ["new 1", "new 2"]


def test_a_stream_after_a_seq_starts_from_the_ring_not_from_offset_zero(
    embedded_location: str,
) -> None:
    """A view that loaded the log up to a seq asks for what follows it (`after_seq`):
    once the live reader's ring covers that seq, its stream starts in the ring, and no
    replay train reads the lifecycle from offset 0 again."""
    with Memory(embedded_location) as writer:
        writer.append_many(Message(speaker="u", content=f"event {i}") for i in range(100))
    handle = LogHandle(embedded_location, poll_interval=0.01)

    async def main() -> tuple[int | None, int | None, int | None, list[str], int]:
        handle.start(asyncio.get_running_loop())
        while not handle.ready.is_set():
            await asyncio.sleep(0.02)
        hub = handle.lifecycle_hub(TINY)  # a ring of 20 frames
        before = hub.offset_after_seq(90)  # no reader yet: cannot tell
        first = [c async for c in hub_stream(hub, 0, limit=100, keepalive=0.5)]
        assert len(frames_of(first)) == 100
        inside, outside = hub.offset_after_seq(90), hub.offset_after_seq(10)
        trains = hub.trains
        tail = [c async for c in hub_stream(hub, inside or 0, limit=9, keepalive=0.5)]
        return before, inside, outside, tail, hub.trains - trains

    try:
        before, inside, outside, tail, trains = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        handle.stop()
    assert before is None and outside is None  # seq 10 fell out of the ring
    assert inside == 91  # one lifecycle event per message here: offset 91 is seq 91's
    assert [offset for offset, _ in frames_of(tail)] == list(range(91, 100))
    assert trains == 0
