"""Issue 11, item 14: many SSE subscribers on a large embedded log, against a real daemon.

Before, each subscriber folded the whole log in a thread of its own: 200 subscribers of a
20k-event log took 842 MB and none got an event in 30 s. Now one shared reader serves
them: all 200 get their first events promptly, one more at the end of the log gets a new
event as it is appended, the daemon's memory stays bounded, and the stream beyond
--max-streams is a 503 in JSON; closed streams give their slots back.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx
from daemon_support import serve

from producers.memory import Memory
from schemas.audit import Message

EVENTS = 20_000
SUBSCRIBERS = 200


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Subscriber:
    """A raw SSE client: counts the events it got, and when it had the first `want`."""

    def __init__(self, port: int, path: str, want: int) -> None:
        self.port, self.path, self.want = port, path, want
        self.events = 0
        self.done_at: float | None = None
        self.status = b""
        self.writer: asyncio.StreamWriter | None = None

    async def run(self, started: float) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(f"GET {self.path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await self.writer.drain()
        self.status = (await reader.readline()).strip()
        tail = b""
        while self.events < self.want:
            chunk = await reader.read(65536)
            if not chunk:
                return
            data = tail + chunk
            self.events += data.count(b"\nid: ") + data.startswith(b"id: ")
            tail = data[-8:]
        self.done_at = time.monotonic() - started

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def test_many_subscribers_share_one_reader_with_bounded_memory_and_a_cap(
    embedded_location: str,
) -> None:
    with Memory(embedded_location) as writer:
        for start in range(0, EVENTS, 2000):
            writer.append_many(
                Message(speaker="agent", content=f"event {i} " + "x" * 60)
                for i in range(start, start + 2000)
            )
        procs: list = []
        with (
            serve([embedded_location], "--max-streams", str(SUBSCRIBERS + 1), procs=procs) as base,
            httpx.Client(base_url=base, timeout=10) as http,
        ):
            pid = procs[0].pid
            port = int(base.rsplit(":", 1)[1])
            assert http.get("/logs/memory-db/search", params={"q": "event"}).status_code == 200
            baseline = rss_mb(pid)
            peak = baseline
            sampling = True

            def sample() -> None:
                nonlocal peak
                while sampling:
                    peak = max(peak, rss_mb(pid))
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()

            async def attack() -> tuple[list[Subscriber], Subscriber, httpx.Response, float]:
                # Two waves: the second comes once the shared reader has gone far past
                # offset 0 (out of its ring), so those subscribers ride a replay train.
                subs: list[Subscriber] = []
                for _wave in range(2):
                    started = time.monotonic()
                    wave = [
                        Subscriber(port, "/logs/memory-db/lifecycle?from_offset=0", 5)
                        for _ in range(SUBSCRIBERS // 2)
                    ]
                    tasks = [asyncio.create_task(s.run(started)) for s in wave]
                    await asyncio.wait_for(asyncio.gather(*tasks), 60)
                    subs += wave
                    await asyncio.sleep(3.0)
                tail = Subscriber(port, f"/logs/memory-db/lifecycle?from_offset={EVENTS}", 1)
                tail_task = asyncio.create_task(tail.run(time.monotonic()))
                await asyncio.sleep(1.0)
                # one more than --max-streams: refused, in JSON
                async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                    refused = await client.get("/logs/memory-db/lifecycle")
                appended = time.monotonic()
                await asyncio.to_thread(
                    writer.add_message, Message(speaker="agent", content="the newest")
                )
                await asyncio.wait_for(tail_task, 30)
                latency = time.monotonic() - appended
                for s in (*subs, tail):
                    s.close()
                return subs, tail, refused, latency

            try:
                subs, tail, refused, tail_latency = asyncio.run(attack())
            finally:
                sampling = False
                sampler.join()
            # every subscriber had its first events promptly
            assert all(s.status == b"HTTP/1.1 200 OK" for s in subs)
            slowest = max(s.done_at for s in subs if s.done_at is not None)
            assert all(s.done_at is not None for s in subs)
            assert slowest < 20, slowest  # within each wave's start
            assert tail.events == 1 and tail_latency < 10, tail_latency
            # memory: one shared reader, not one fold per subscriber
            grown = peak - baseline
            assert grown < 250, f"RSS grew {grown:.0f} MB (from {baseline:.0f} MB)"
            # the cap: a clear 503, in JSON
            assert refused.status_code == 503, refused.text
            message = refused.json()["message"]
            assert "lifecycle" in message and str(SUBSCRIBERS + 1) in message, message
            # closed streams give their slots back
            deadline = time.monotonic() + 15
            while True:
                metrics = http.get("/metrics").text
                if "memstream_queryd_lifecycle_streams 0.0" in metrics:
                    break
                assert time.monotonic() < deadline, "the stream slots were not released"
                time.sleep(0.2)
            with http.stream("GET", "/logs/memory-db/lifecycle", params={"limit": 1}) as again:
                assert again.status_code == 200
                frame = next(line for line in again.iter_lines() if line.startswith("data: "))
            assert json.loads(frame[6:])["offset"] == 0
            print(
                f"RSS {baseline:.0f} -> peak {peak:.0f} MB; 2 waves of 100 subscribers had 5 "
                "events "
                f"each within {slowest:.2f} s; a new event reached the tail in "
                f"{tail_latency:.2f} s"
            )
