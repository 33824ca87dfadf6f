"""The connection cap's choice of whom to evict (queryd.daemon.connections.ConnectionGuard).

A CI run saw a health probe's connection reset under a slowloris flood: the probe was
accepted early in a burst, and the later connections of the same burst evicted it (the
oldest idle one left) before its request, already sent, was read. Only a connection
that has had its chance (bytes read, or `GRACE_S` since it was accepted) is evicted now.
"""

from __future__ import annotations

from dataclasses import dataclass

from queryd.daemon.connections import BACKLOG, ConnectionGuard


@dataclass(eq=False)
class Conn:
    name: str
    heard: bool = False
    busy: bool = False
    evicted: bool = False

    def evictable(self) -> bool:
        return self.heard and not self.busy

    def evict(self) -> None:
        self.evicted = True


def test_a_fresh_connection_is_not_evicted_by_the_rest_of_its_burst() -> None:
    guard = ConnectionGuard(max_connections=4, read_timeout=3)
    slow = [Conn(f"slow{i}", heard=True) for i in range(3)]
    for c in slow:
        assert guard.admit(c)
    probe = Conn("probe")  # accepted, its request not read yet
    assert guard.admit(probe)
    burst = [Conn(f"burst{i}") for i in range(10)]
    for c in burst:
        assert guard.admit(c)
    assert not probe.evicted
    assert all(c.evicted for c in slow)  # the ones that had their chance went first
    assert guard.evicted == 3 and guard.refused == 0


def test_past_the_cap_and_one_burst_with_nothing_evictable_a_connection_is_refused() -> None:
    guard = ConnectionGuard(max_connections=2, read_timeout=3)
    fresh = [Conn(f"c{i}") for i in range(2 + BACKLOG)]
    assert all(guard.admit(c) for c in fresh)
    late = Conn("late")
    assert not guard.admit(late)
    assert guard.refused == 1 and not any(c.evicted for c in fresh)
    fresh[5].heard = True  # once read from (and idle), it is the one to go
    assert guard.admit(late)
    assert fresh[5].evicted and guard.evicted == 1


def test_a_busy_connection_is_never_evicted() -> None:
    guard = ConnectionGuard(max_connections=1, read_timeout=3)
    busy = Conn("busy", heard=True, busy=True)
    assert guard.admit(busy)
    newcomer = Conn("new", heard=True)
    assert guard.admit(newcomer)  # over the cap, within a burst of it
    assert not busy.evicted
    third = Conn("third")
    assert guard.admit(third)
    assert newcomer.evicted and not busy.evicted
