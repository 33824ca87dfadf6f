"""Many logs, many projector processes: a supervisor of one `Projector` per owned log.

A `ProjectorGroup` follows a set of logs (a list of locations, or every log topic whose
name matches a glob, `LogPattern`), looks for new ones every `refresh_s` seconds, and
shares them with every other process of the same group through Kafka's consumer-group
protocol:

- each process subscribes one consumer of the group (the coordinator) to the log topics
  it follows. A log is one partition, so the group gives each log to exactly one member.
  By default the group speaks the consumer group protocol of KIP-848 (Kafka 4):
  the broker assigns, moving only the logs that must move when a member comes or goes,
  and a member learns of its new logs in its next heartbeat's answer, with no round of
  every member rejoining (the classic protocol's, `group_protocol="classic"`, with the
  cooperative-sticky assignor, which a busy machine stretched from the session's 6 s to
  11-12 s). The coordinator never reads a record: its partitions are paused as soon as
  they are assigned, and it only serves the group's heartbeats and rebalance callbacks;
- a log assigned to this member gets a `Projector` (its own consumer, its own Redis
  lease, its own transactional producer, its position in its snapshot: exactly as when
  it runs alone), in a thread; a log revoked (or lost, this member's session having
  expired) has its projector stopped before the group may give it to another member;
- a member that dies (SIGKILL) stops heartbeating: after `session_timeout_ms` the group
  gives its logs to the others, whose projectors take each log's lease (expired by then:
  it lives `lease_ms`, 3 s by default, shorter than the session) and resume from the
  snapshot. The group decides who should fold a log; what makes a change of owner safe is
  the projector's own fencing, unchanged: the lease in Redis (snapshot writes are refused
  to a projector that does not hold it) and the per-log ``transactional.id`` (the new
  owner's producer aborts the old one's open transaction and fences it).

The group's membership is not needed for safety, only for sharing: two members that
disagree for a moment (one still folding a log the group gave to the other) wait for each
other on the log's lease.

It is needed for liveness, and two things took it away after the machine stalled in
`bench cluster` (the broker fenced by its starved controller, the group coordinator
unloaded and loaded again), each seen twice; both are bounded now, their causes inside
the clients not known:

- a member's client never acknowledged the revocation the reloaded coordinator asked of
  it, so the broker kept 100 logs on it while it ran 50, and gave the other half to no
  one until the member's rebalance timeout (then 300 s) fenced it; the client never
  joined again. The rebalance timeout (``max.poll.interval.ms``, which the consumer
  protocol sends as the time a member has to give logs up) is `rebalance_timeout_ms`,
  30 s; and every `refresh_s` the member compares the broker's view of its logs (the
  group's description) with the projectors it runs: after `stuck_s` (20 s) of
  disagreement it stops its projectors, leaves the group and joins it again with a new
  consumer (`rejoins` counts it);
- this process's one admin client (shared by its projectors) answered "Broker transport
  failure" after every 30 s wait for a single log's metadata, for minutes, while a new
  client answered at once: no projector could start. Every `refresh_s` the member asks
  each of its shared clients (`ADMIN_CLIENTS`, each projector uses one) for one owned
  log's metadata (waiting `admin_probe_s`); after `ADMIN_FAILURES` failures running, when
  a new client answers, it takes new clients and rejoins as above, so that every
  projector is made again with them (`admin_renewals` counts it).

A member keeps a projector made ahead for each log it follows and does not fold
(`_standby_loop`): a takeover then starts at the log's lease, without first checking the
log's topics (several questions to the broker for each log).
"""

from __future__ import annotations

import fnmatch
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from producers.keys.kafka_keys import KEYS_SUFFIX
from producers.logs.kafka_client import client_conf, error_cause
from producers.logs.kafka_evidence import CHECKPOINTS_SUFFIX
from producers.logs.location import KafkaLocation, parse_kafka_location
from projector.commit_pacer import CommitPacer
from projector.memex_topic import MEMEX_TOPIC_SUFFIX
from projector.service import Projector, ProjectorStats
from schemas.errors import LocationError, MemstreamError

__all__ = [
    "DEFAULT_COMMITS_PER_S",
    "DEFAULT_GROUP",
    "DERIVED_SUFFIXES",
    "GROUP_PROTOCOLS",
    "LogPattern",
    "ProjectorGroup",
    "is_log_topic",
]

log = logging.getLogger("memstream.projector.group")

DEFAULT_GROUP = "memstream-projectors"
# A member's lifecycle transactions a second, in all (`projector.commit_pacer`).
DEFAULT_COMMITS_PER_S = 100.0
GROUP_PROTOCOLS = ("consumer", "classic")
# Failed probes of the shared admin client, running, before a new one is tried (see above).
ADMIN_FAILURES = 3

# Admin clients a member's projectors share, each projector one (round robin). A broker
# answers one connection's requests one at a time, in order: through one client, the
# questions of 17 projectors taking over logs at once (about ten each) queued for
# seconds, and librdkafka drops a connection whose requests time out, failing every
# request in flight on it ("Broker transport failure" for every projector of the member).
ADMIN_CLIENTS = 4

# A member makes projectors ahead (`ProjectorGroup._standby_loop`) only once the group has
# not moved logs to it or away for this long: not while it takes logs on (its start, a
# takeover), nor before it knows which logs are its own.
STANDBY_CALM_S = 5.0
# Between two projectors made ahead, at least this long, and twice as long as the last
# took to make (its topics' checks: 8 questions to the broker, about 6 ms on an idle one).
STANDBY_PAUSE_S = 0.05
# The topics memstream derives from a log (never logs themselves): LOG + one of these.
DERIVED_SUFFIXES = (".lifecycle", CHECKPOINTS_SUFFIX, MEMEX_TOPIC_SUFFIX, KEYS_SUFFIX)
_GLOB = re.compile(r"^[A-Za-z0-9._\-*\[\]!]{1,240}$")


def is_log_topic(topic: str) -> bool:
    """Whether a topic may be a log: not one of Kafka's internal topics (``__...``, and
    any ``_``-prefixed one such as ``_schemas``), nor a topic derived from a log."""
    return not topic.startswith("_") and not topic.endswith(DERIVED_SUFFIXES)


@dataclass(frozen=True)
class LogPattern:
    """``kafka://HOST:PORT[,...]/GLOB?redis=...``: every log topic whose whole name matches
    GLOB (``*``, ``[abc]``, ``[!abc]``; ``?`` cannot be used, it starts the query), each
    followed at the location that names it in place of GLOB."""

    bootstrap: str
    glob: str
    query: str

    def matches(self, topic: str) -> bool:
        return is_log_topic(topic) and fnmatch.fnmatchcase(topic, self.glob)

    def location(self, topic: str) -> KafkaLocation:
        return parse_kafka_location(f"kafka://{self.bootstrap}/{topic}?{self.query}")

    @classmethod
    def parse(cls, text: str) -> LogPattern:
        """LocationError naming what is wrong."""
        expected = "expected kafka://HOST:PORT/GLOB?redis=redis://HOST:PORT/DB"
        if not text.startswith("kafka://"):
            raise LocationError(f"--logs-matching {text!r}: {expected}")
        bootstrap, _, rest = text[len("kafka://") :].partition("/")
        glob, _, query = rest.partition("?")
        if not _GLOB.match(glob):
            raise LocationError(
                f"--logs-matching {text!r}: GLOB {glob!r} may hold letters, digits, '.', "
                "'_', '-', '*' and '[...]' only"
            )
        pattern = cls(bootstrap, glob, query)
        try:  # the rest of the location is checked as a log's would be
            pattern.location("x")
        except LocationError as exc:
            raise LocationError(f"--logs-matching {text!r}: {exc}") from None
        return pattern


class _Follower:
    """One owned log's projector, in a thread; one that fails (a `MemstreamError`: the
    log's topics refused, Redis unreachable at its start) is made again, with backoff,
    until stopped."""

    def __init__(self, location: KafkaLocation, make: Callable[[KafkaLocation], Projector]):
        self.location = location
        self.stop = threading.Event()
        self.projector: Projector | None = None
        self.failures = 0
        self.started = time.monotonic()
        self._make = make
        self.thread = threading.Thread(
            target=self._run, name=f"projector-{location.topic}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        topic = self.location.topic
        while not self.stop.is_set():
            try:
                self.projector = self._make(self.location)
                self.projector.run(self.stop)
                return
            except MemstreamError as exc:
                self.failures += 1
                log.warning("%s: the projector stopped (%s); starting it again", topic, exc)
            except Exception:  # a bug must not take the other logs' projectors down
                self.failures += 1
                log.exception("%s: the projector failed; starting it again", topic)
            self.stop.wait(min(30.0, 0.5 * 2 ** min(self.failures, 6)))


class ProjectorGroup:
    """Follow many logs, sharing them with the other members of `group` (see the module).

    `logs`: locations (``kafka://...``) to follow; `pattern`: a `LogPattern` text. Every
    log is on one cluster. `group_protocol`: ``"consumer"`` (KIP-848, the default) or
    ``"classic"``. `session_timeout_ms` / `heartbeat_ms`: the group member's session (a
    dead member's logs move after this long) and heartbeat. The session is 4 s by default
    (6 s before: the takeover is the session plus the projectors' start; measured in the
    README, `bench cluster`); a member starved of CPU for that long loses its logs for a
    moment, which the projectors' fencing makes safe (they are given back, resumed from
    their snapshots). With the consumer protocol they
    are the group's own settings (``consumer.session.timeout.ms`` and
    ``consumer.heartbeat.interval.ms``, set on the broker when the member starts), which a
    broker takes within its ``group.consumer.min.*`` bounds only: 45 s and 5 s by default,
    2 s and 250 ms on memstream's stack. A broker that refuses them is warned of, naming
    the setting, and its own are used. With the classic protocol they are the consumer's,
    within ``group.min.session.timeout.ms`` (6000 by default, 2000 on memstream's stack):
    one outside it stops `run` with a `LocationError` naming it. `commits_per_s`: the
    member's budget of lifecycle transactions, shared by its projectors
    (`projector.commit_pacer`; None: none). `projector`: keyword arguments of every
    `Projector`.
    """

    def __init__(
        self,
        logs: Sequence[str] = (),
        *,
        pattern: str | None = None,
        group: str = DEFAULT_GROUP,
        refresh_s: float = 3.0,
        group_protocol: str = "consumer",
        session_timeout_ms: int = 4_000,
        heartbeat_ms: int = 500,
        stop_timeout_s: float = 20.0,
        rebalance_timeout_ms: int = 30_000,
        stuck_s: float = 20.0,
        admin_probe_s: float = 5.0,
        commits_per_s: float | None = DEFAULT_COMMITS_PER_S,
        projector: dict[str, Any] | None = None,
    ) -> None:
        self.listed = {loc.topic: loc for loc in self._parse_logs(logs)}
        self.pattern = LogPattern.parse(pattern) if pattern is not None else None
        if not self.listed and self.pattern is None:
            raise LocationError("a projector group needs logs (--log) or a pattern")
        bootstraps = {loc.bootstrap for loc in self.listed.values()}
        if self.pattern is not None:
            bootstraps.add(self.pattern.bootstrap)
        if len(bootstraps) > 1:
            raise LocationError(
                f"the logs of one projector group must be on one Kafka cluster, not "
                f"{sorted(bootstraps)}"
            )
        if not group or len(group) > 200:
            raise LocationError(f"--group {group!r}: a name of 1 to 200 characters")
        if group_protocol not in GROUP_PROTOCOLS:
            raise LocationError(
                f"--group-protocol {group_protocol!r}: one of {', '.join(GROUP_PROTOCOLS)}"
            )
        self.bootstrap = bootstraps.pop()
        self.group = group
        self.group_protocol = group_protocol
        self.refresh_s = refresh_s
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.stop_timeout_s = stop_timeout_s
        if rebalance_timeout_ms <= stop_timeout_s * 1000:
            # A revocation's callback waits up to `stop_timeout_s` for the projectors.
            raise LocationError(
                f"a rebalance timeout of {rebalance_timeout_ms} ms must exceed the "
                f"{stop_timeout_s:g} s a revocation may wait for its projectors"
            )
        self.rebalance_timeout_ms = rebalance_timeout_ms
        for name, value in (("stuck_s", stuck_s), ("admin_probe_s", admin_probe_s)):
            if not value > 0:  # NaN too
                raise LocationError(f"{name} {value!r}: a number of seconds above 0")
        self.stuck_s = stuck_s
        if commits_per_s is not None and not commits_per_s > 0:  # NaN too
            raise LocationError(
                f"commits per second {commits_per_s!r}: a number above 0 (None: no budget)"
            )
        # One budget of lifecycle transactions for all of this member's projectors.
        self.pacer = None if commits_per_s is None else CommitPacer(commits_per_s)
        self.projector_options = dict(projector or {})
        # The discovery's admin client, the first of those the projectors share.
        self.admin = AdminClient(client_conf(self.bootstrap))
        self._admins = self._admin_pool(self.admin)
        self._made = 0  # projectors made: the next takes the next admin client
        self.followers: dict[str, _Follower] = {}
        # Projectors made ahead for logs this member does not fold (`_standby_loop`).
        self._standby: dict[str, Projector] = {}
        self.standby_used = 0  # logs taken on with a projector made ahead
        self._assigned_at: float | None = None  # when the group last moved logs here or away
        self._lock = threading.Lock()
        self.subscribed: tuple[str, ...] = ()
        # Totals of the projectors stopped so far (for a report at the end).
        self.stopped = ProjectorStats()
        self.handovers = 0  # logs given up to the group (revoked or lost)
        self._stopping: list[threading.Thread] = []  # waiting for lost logs' projectors
        # The membership check (see the module): this member's id, as its consumer last
        # said; since when the broker's view of its logs and its projectors disagree; and
        # the poll loop's cue to leave the group and join it again.
        self._member_id: str | None = None
        self._disagree_since: float | None = None
        self._rejoin = threading.Event()
        self.rejoins = 0
        # The admin client check (see the module): consecutive failures of the shared
        # client to read an owned log's metadata, and the new client to put in its place.
        self.admin_probe_s = admin_probe_s
        self._admin_failures = 0
        self._new_admin: AdminClient | None = None
        self.admin_renewals = 0

    @staticmethod
    def _parse_logs(logs: Iterable[str]) -> list[KafkaLocation]:
        parsed = [parse_kafka_location(text) for text in logs]
        seen: dict[str, KafkaLocation] = {}
        for loc in parsed:
            if loc.topic in seen and seen[loc.topic] != loc:
                raise LocationError(
                    f"--log: log {loc.topic!r} is named twice, differently: "
                    f"{seen[loc.topic]} and {loc}"
                )
            seen[loc.topic] = loc
        return list(seen.values())

    # --- what is followed --------------------------------------------------------------------

    def location(self, topic: str) -> KafkaLocation | None:
        """Where the log `topic` is followed (None: not one of this group's logs)."""
        listed = self.listed.get(topic)
        if listed is not None:
            return listed
        if self.pattern is not None and self.pattern.matches(topic):
            return self.pattern.location(topic)
        return None

    def discover(self) -> tuple[str, ...]:
        """The group's logs that exist now (raises KafkaException: the cluster's metadata
        could not be read)."""
        topics = self.admin.list_topics(timeout=10).topics
        return tuple(
            sorted(
                name
                for name, meta in topics.items()
                if meta.error is None and self.location(name) is not None
            )
        )

    def owned(self) -> list[str]:
        """The logs this member folds now."""
        with self._lock:
            return sorted(self.followers)

    # --- the group's callbacks (on the coordinator's poll) ------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned_at = time.monotonic()
        consumer.incremental_assign(partitions)
        if partitions:
            # The coordinator never fetches: each log's projector reads it.
            consumer.pause(partitions)
        for tp in partitions:
            location = self.location(tp.topic)
            if tp.partition != 0 or location is None:
                continue
            with self._lock:
                if tp.topic in self.followers:
                    continue
                log.info("%s: assigned to this member; starting its projector", tp.topic)
                self.followers[tp.topic] = _Follower(location, self._make)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned_at = time.monotonic()
        self._stop([tp.topic for tp in partitions if tp.partition == 0], "revoked")
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # This member's session expired: the group has given these logs to others already,
        # whose projectors fence ours (lease, transactional id). Waiting here for ours to
        # stop would only delay this member's rejoining (librdkafka rejoins once this
        # callback returns): 11-51 s on a loaded three-node cluster.
        lost = [tp.topic for tp in partitions if tp.partition == 0]
        if lost:
            # A live member losing its logs is a fault to see (a broker or this process
            # stalled past the session): each of them starts again from its snapshot.
            log.warning(
                "group %r: this member's session expired (no heartbeat answered within the "
                "group's session); its %d log(s) are given out again",
                self.group,
                len(lost),
            )
        self._assigned_at = time.monotonic()
        self._stop(lost, "lost", wait=False)
        consumer.incremental_unassign(partitions)

    def _make(self, location: KafkaLocation) -> Projector:
        """The projector of a log assigned to this member: the one made ahead for it
        (`_standby_loop`) when there is one, made with the admin client in use."""
        with self._lock:
            ready = self._standby.pop(location.topic, None)
            if ready is not None and self._current(ready) and ready.location == location:
                self.standby_used += 1
                return ready
        return self._new_projector(location)

    def _admin_pool(self, first: AdminClient) -> list[AdminClient]:
        return [first] + [
            AdminClient(client_conf(self.bootstrap)) for _ in range(ADMIN_CLIENTS - 1)
        ]

    def _current(self, projector: Projector) -> bool:
        """Whether `projector` was made with an admin client still in use."""
        return any(projector._admin is admin for admin in self._admins)

    def _new_projector(self, location: KafkaLocation) -> Projector:
        with self._lock:
            admin = self._admins[self._made % len(self._admins)]
            self._made += 1
        return Projector(location, admin=admin, pacer=self.pacer, **self.projector_options)

    def _starting(self) -> bool:
        """Whether this member has not been given its logs yet, or was given or relieved
        of some within `STANDBY_CALM_S` (no projector is made ahead meanwhile)."""
        changed = self._assigned_at
        return changed is None or time.monotonic() - changed < STANDBY_CALM_S

    def _standby_loop(self, stop: threading.Event, found: list[tuple[str, ...]]) -> None:
        """Keep a projector made ahead for every log of the group this member does not
        fold, so that taking one over (a member died) starts at its lease, not at the
        checks of its topics a new projector makes first (several questions to the broker
        each, asked by every log's projector at once: 1.5 s of a takeover in `bench
        cluster` at 100 logs). Made one at a time, paced (`STANDBY_PAUSE_S`), and not
        while this member takes logs on (`_starting`); a made projector holds no Kafka
        client and no connection of its own; one for a log no longer followed, or made
        with an admin client since replaced, is dropped."""
        while not stop.is_set():
            wanted = set(found[0])
            with self._lock:
                for topic in list(self._standby):
                    if topic not in wanted or not self._current(self._standby[topic]):
                        del self._standby[topic]
                missing = [t for t in sorted(wanted) if t not in self.followers]
                missing = [t for t in missing if t not in self._standby]
            for topic in missing:
                location = self.location(topic)
                if stop.is_set() or self._rejoin.is_set() or self._starting():
                    break
                if location is None:
                    continue
                began = time.monotonic()
                try:
                    projector = self._new_projector(location)
                except Exception as exc:  # its follower says it, if the log comes here
                    log.debug("%s: no projector made ahead (%s)", topic, exc)
                    projector = None
                if projector is not None:
                    with self._lock:
                        if topic not in self.followers:
                            self._standby[topic] = projector
                # Paced by the broker's answers: at most a third of the time asking.
                stop.wait(max(STANDBY_PAUSE_S, 2 * (time.monotonic() - began)))
            stop.wait(self.refresh_s)

    def _stop(self, topics: Iterable[str], why: str, *, wait: bool = True) -> None:
        """Stop these logs' projectors (all at once; each commits what it published and
        releases the log's lease), waiting at most `stop_timeout_s` in all; with `wait`
        False, returning at once while a thread waits (`run` waits for it at its end)."""
        with self._lock:
            leaving = [(t, self.followers.pop(t)) for t in topics if t in self.followers]
        for topic, follower in leaving:
            log.info("%s: %s; stopping its projector", topic, why)
            follower.stop.set()
        if not wait:
            waiter = threading.Thread(
                target=self._wait_stopped, args=(leaving,), name="group-stopping", daemon=True
            )
            with self._lock:
                self._stopping = [t for t in self._stopping if t.is_alive()] + [waiter]
            waiter.start()
            return
        self._wait_stopped(leaving)

    def _wait_stopped(self, leaving: list[tuple[str, _Follower]]) -> None:
        """Wait (at most `stop_timeout_s` in all) for these stopping projectors; count what
        they did."""
        deadline = time.monotonic() + self.stop_timeout_s
        for topic, follower in leaving:
            follower.thread.join(max(0.0, deadline - time.monotonic()))
            if follower.thread.is_alive():
                log.warning("%s: its projector did not stop in time; left to finish", topic)
            projector = follower.projector
            with self._lock:
                if projector is not None:
                    s, total = projector.stats, self.stopped
                    total.folded += s.folded
                    total.published += s.published
                    total.skipped += s.skipped
                    total.snapshots += s.snapshots
                    total.commits += s.commits
                    total.rebuilds += s.rebuilds
                    total.restarts += s.restarts
                self.handovers += 1

    # --- the loop -----------------------------------------------------------------------------

    def consumer_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            **client_conf(self.bootstrap),
            "group.id": self.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
            # With the consumer protocol, the time a member has to give up the logs the
            # broker moves away from it (the classic protocol's rebalance timeout too).
            "max.poll.interval.ms": self.rebalance_timeout_ms,
        }
        if self.group_protocol == "consumer":
            # The session and heartbeat are the group's, on the broker (`_configure_group`).
            conf["group.protocol"] = "consumer"
        else:
            conf["partition.assignment.strategy"] = "cooperative-sticky"
            conf["session.timeout.ms"] = self.session_timeout_ms
            conf["heartbeat.interval.ms"] = self.heartbeat_ms
        return conf

    def _configure_group(self) -> None:
        """The consumer protocol: set the group's session and heartbeat on the broker. One
        it refuses (outside its bounds, or no right to) is warned of; the broker's own
        settings are used then, and the group still works, only slower to move a dead
        member's logs."""
        if self.group_protocol != "consumer":
            return
        settings = {
            "consumer.session.timeout.ms": self.session_timeout_ms,
            "consumer.heartbeat.interval.ms": self.heartbeat_ms,
        }
        resource = ConfigResource(
            ResourceType.GROUP,
            self.group,
            incremental_configs=[
                ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
                for name, value in settings.items()
            ],
        )
        try:
            for future in self.admin.incremental_alter_configs([resource]).values():
                future.result(timeout=15)
        except (KafkaException, TimeoutError) as exc:
            cause = error_cause(exc) if isinstance(exc, KafkaException) else "no answer in 15 s"
            log.warning(
                "group %r: the broker refused its session of %d ms and heartbeat of %d ms "
                "(%s: a broker bounds them by its group.consumer.min.session.timeout.ms and "
                "group.consumer.min.heartbeat.interval.ms, and setting them needs the right "
                "to alter the group's configs); a dead member's logs move after the "
                "broker's own session",
                self.group,
                self.session_timeout_ms,
                self.heartbeat_ms,
                cause,
            )

    def _new_consumer(self) -> Consumer:
        return Consumer(self.consumer_conf())

    def _discover_loop(self, stop: threading.Event, found: list[tuple[str, ...]]) -> None:
        """Every `refresh_s`, the group's logs that exist now into `found` (its one item).

        A thread of its own: a metadata request waits up to 10 s on a slow broker, and the
        loop that polls the group's consumer must not wait with it (the group's callbacks,
        a dead member's logs among them, are served on that poll)."""
        failures = 0
        while not stop.is_set():
            try:
                found[0] = self.discover()
                failures = 0
            except KafkaException as exc:
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "cannot list the cluster's topics (%s); trying again", error_cause(exc)
                    )
            self._check_membership()
            self._check_admin()
            stop.wait(self.refresh_s)

    def _check_admin(self) -> None:
        """Cue the poll loop to put new admin clients in place of the shared ones, and to
        rejoin with them, once one of them has failed `ADMIN_FAILURES` times running to
        read an owned log's metadata while a new client reads it (see the module)."""
        owned = self.owned()
        if not owned or self._new_admin is not None:
            return
        try:
            for admin in self._admins:
                admin.list_topics(owned[0], timeout=self.admin_probe_s)
            self._admin_failures = 0
            return
        except KafkaException as exc:
            self._admin_failures += 1
            cause = error_cause(exc)
        if self._admin_failures < ADMIN_FAILURES:
            return
        fresh = AdminClient(client_conf(self.bootstrap))
        try:
            fresh.list_topics(owned[0], timeout=self.admin_probe_s)
        except KafkaException:
            return  # the broker does not answer a new client either: nothing to replace
        log.warning(
            "group %r: an admin client of this process failed %d times running to read "
            "log %s's metadata (%s) while a new client reads it; replacing its admin "
            "clients, and restarting this member's projectors with the new ones",
            self.group,
            self._admin_failures,
            owned[0],
            cause,
        )
        self._admin_failures = 0
        self._new_admin = fresh
        self._rejoin.set()

    def _group_view(self) -> dict[str, set[str]] | None:
        """The broker's view of the group: each member's id and the logs (partition 0 of
        their topics) assigned to it now; None when the broker does not say."""
        try:
            futures = self.admin.describe_consumer_groups([self.group], request_timeout=5)
            described = futures[self.group].result(timeout=10)
        except (KafkaException, TimeoutError):
            return None
        view: dict[str, set[str]] = {}
        for member in described.members:
            assigned = member.assignment.topic_partitions if member.assignment else []
            view[member.member_id] = {tp.topic for tp in assigned if tp.partition == 0}
        return view

    def _check_membership(self) -> None:
        """Cue the poll loop to rejoin once the broker's view of this member's logs and
        the projectors it runs have disagreed for `stuck_s` (see the module)."""
        member = self._member_id
        view = self._group_view() if member is not None else None
        if member is None or view is None:  # not joined yet, or no answer: no comparing
            self._disagree_since = None
            return
        assigned = view.get(member)
        owned = set(self.owned())
        if assigned is not None and assigned == owned:
            self._disagree_since = None
            return
        now = time.monotonic()
        if self._disagree_since is None:
            self._disagree_since = now
        elif now - self._disagree_since >= self.stuck_s and not self._rejoin.is_set():
            log.warning(
                "group %r: for %.0f s the broker has counted %s as this member's (%s) "
                "while it runs the projectors of %d; leaving the group and joining again",
                self.group,
                now - self._disagree_since,
                "no log" if assigned is None else f"{len(assigned)} log(s)",
                "not a member" if assigned is None else member,
                len(owned),
            )
            self._rejoin.set()

    def _rejoined(self, consumer: Consumer) -> Consumer:
        """A new consumer of the group in place of `consumer`, whose projectors are
        stopped (each releases its log's lease) and which leaves the group."""
        self._stop(self.owned(), "rejoining the group")

        def close() -> None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                log.debug("closing the group's consumer failed", exc_info=True)

        # Not waited for past 10 s: a client stuck in its group state may not leave; the
        # broker fences it after the rebalance timeout.
        closing = threading.Thread(target=close, name="group-leaving", daemon=True)
        closing.start()
        closing.join(10)
        if self._new_admin is not None:  # the old one's projectors are stopped
            self.admin, self._new_admin = self._new_admin, None
            self._admins = self._admin_pool(self.admin)
            self.admin_renewals += 1
        self.rejoins += 1
        self._assigned_at = None
        self.subscribed = ()
        self._member_id = None
        self._disagree_since = None
        self._rejoin.clear()
        return self._new_consumer()

    def run(self, stop: threading.Event) -> None:
        """Take part in the group until `stop` is set; then stop every projector of this
        member (each releases its log's lease) and leave the group, so that the others
        take its logs at once."""
        self._configure_group()
        consumer = self._new_consumer()
        found: list[tuple[str, ...]] = [self.subscribed]
        done = threading.Event()
        discovery = threading.Thread(
            target=self._discover_loop, args=(done, found), name="group-discovery", daemon=True
        )
        discovery.start()
        standby = threading.Thread(
            target=self._standby_loop, args=(done, found), name="group-standby", daemon=True
        )
        standby.start()
        try:
            while not stop.is_set():
                if self._rejoin.is_set():
                    consumer = self._rejoined(consumer)
                self._resubscribe(consumer, found[0])
                # Serves the group's heartbeats' answers and callbacks; never a record.
                message = consumer.poll(0.2)
                self._member_id = consumer.memberid() or None
                error = None if message is None else message.error()
                if error is not None:
                    if error.code() == KafkaError.INVALID_SESSION_TIMEOUT:
                        # The classic protocol's session outside the broker's bounds: the
                        # member could never join; trying again changes nothing.
                        raise LocationError(
                            f"group {self.group!r}: the broker refuses a session of "
                            f"{self.session_timeout_ms} ms (--group-session-ms) with the "
                            "classic protocol: its group.min.session.timeout.ms and "
                            "group.max.session.timeout.ms bound it"
                        )
                    if error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        log.warning("the projector group's consumer: %s", error)
        finally:
            done.set()
            self._stop(self.owned(), "stopping")
            with self._lock:
                stopping = list(self._stopping)
            for waiter in stopping:  # lost logs' projectors, still stopping
                waiter.join(self.stop_timeout_s)
            try:
                consumer.close()  # leaves the group: a rebalance gives its logs to others
            except (KafkaException, RuntimeError):
                log.debug("closing the group's consumer failed", exc_info=True)
            discovery.join(0.1)  # a daemon; it ends after its question in flight

    def _resubscribe(self, consumer: Consumer, topics: tuple[str, ...]) -> None:
        if topics == self.subscribed:
            return
        new = sorted(set(topics) - set(self.subscribed))
        if new:
            log.info("following %d log(s) more: %s", len(new), ", ".join(new[:10]))
        if topics:
            consumer.subscribe(
                list(topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        else:
            consumer.unsubscribe()
        self.subscribed = topics
