"""Location strings: a filesystem path for the embedded log, a kafka:// URL otherwise.

``kafka://HOST:PORT[,HOST:PORT...]/LOG?redis=redis://HOST:PORT/DB[&replication=N]``:
LOG is the topic (one partition), its lifecycle events go to ``LOG.lifecycle``, its
snapshots to Redis under keys starting ``memstream:LOG:``. ``replication=N`` is the least
replication its topics must have (a new topic gets N, an existing one with fewer replicas
is refused); without it a new topic gets the cluster's default replication factor. This
module is the one place that parses it; the projector and queryd take the same string.

Credentials: the Redis URL may carry ``USER:PASSWORD@`` (a secured stack's ACL user); a
Kafka broker's come from the environment (``MEMSTREAM_KAFKA_USERNAME`` /
``MEMSTREAM_KAFKA_PASSWORD``, see `producers.logs.kafka_client.client_conf`), never from
the location. Wherever a location is shown (errors, logs, reports, reprs) it goes through
`redact`, which hides any password in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from os import PathLike
from urllib.parse import parse_qs, urlsplit

from schemas.errors import LocationError

__all__ = [
    "KAFKA_SCHEME",
    "PATH_SCHEME",
    "KafkaLocation",
    "parse_kafka_location",
    "scheme_of",
    "is_kafka_location",
    "redact",
    "check_topic_name",
]

KAFKA_SCHEME = "kafka"
PATH_SCHEME = ""  # a filesystem path (the embedded log) has no scheme

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,240}$")
_PARAMS = {"redis", "replication"}
# SCHEME://USER:PASSWORD@ anywhere in a text (a location, or the Redis URL inside one).
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#\s]*):[^@/?#\s]*@")
REDACTED = "***"


def redact(text: str | PathLike[str]) -> str:
    """`text` with the password of every ``SCHEME://USER:PASSWORD@`` in it replaced by
    ``***``: what to show of a location or URL that may hold credentials."""
    return _USERINFO.sub(rf"\g<head>:{REDACTED}@", str(text))


def check_topic_name(name: str) -> str:
    """`name` if it is a valid log (topic) name, else LocationError naming it."""
    if not _TOPIC.match(name) or name in (".", ".."):
        raise LocationError(
            f"LOG {name!r} is not a valid topic name (letters, digits, '.', '_', '-')"
        )
    return name


def scheme_of(location: str | PathLike[str]) -> str:
    """The scheme of a location: ``kafka`` for a kafka:// URL, `PATH_SCHEME` for a
    filesystem path, and for any other ``SCHEME://`` text what precedes ``://`` (which no
    adapter opens)."""
    text = str(location)
    if text.startswith("kafka://"):
        return KAFKA_SCHEME
    scheme, separator, _ = text.partition("://")
    return scheme if separator else PATH_SCHEME


def is_kafka_location(location: str | PathLike[str]) -> bool:
    """Whether `location` names a log on Kafka (it may still be malformed)."""
    return scheme_of(location) == KAFKA_SCHEME


@dataclass(frozen=True)
class KafkaLocation:
    bootstrap: str
    topic: str
    redis_url: str
    # The least replication its topics must have (``replication=N``); None: whatever the
    # cluster's default.replication.factor gives a new topic, and no check on an old one.
    replication_factor: int | None = None

    @property
    def lifecycle_topic(self) -> str:
        return f"{self.topic}.lifecycle"

    @property
    def key_prefix(self) -> str:
        return f"memstream:{self.topic}:"

    def __str__(self) -> str:
        """The location string itself, credentials and all (to hand on, never to show:
        `shown` is for messages)."""
        text = f"kafka://{self.bootstrap}/{self.topic}?redis={self.redis_url}"
        if self.replication_factor is not None:
            text += f"&replication={self.replication_factor}"
        return text

    @property
    def shown(self) -> str:
        """The location as messages and logs show it: any password replaced by ``***``."""
        return redact(str(self))

    def __repr__(self) -> str:
        return f"KafkaLocation({self.shown!r})"


def parse_kafka_location(text: str) -> KafkaLocation:
    """The parts of a kafka:// location; LocationError naming what is wrong."""
    expected = "expected kafka://HOST:PORT/LOG?redis=redis://HOST:PORT/DB"
    shown = redact(text)
    if not is_kafka_location(text):
        raise LocationError(f"location {shown!r}: {expected}")
    parts = urlsplit(text)
    bootstrap = parts.netloc
    if "@" in bootstrap:
        raise LocationError(
            f"location {shown!r}: a kafka:// location carries no credentials; set "
            "MEMSTREAM_KAFKA_USERNAME and MEMSTREAM_KAFKA_PASSWORD instead"
        )
    if not bootstrap or any(":" not in hp for hp in bootstrap.split(",")):
        raise LocationError(f"location {shown!r}: no HOST:PORT of a broker; {expected}")
    topic = parts.path.lstrip("/")
    if not _TOPIC.match(topic) or topic in (".", ".."):
        raise LocationError(
            f"location {shown!r}: LOG {topic!r} is not a valid topic name "
            "(letters, digits, '.', '_', '-')"
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = set(query) - _PARAMS
    if unknown:
        raise LocationError(f"location {shown!r}: unknown parameters {sorted(unknown)}")
    redis_url = (query.get("redis") or [""])[0]
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise LocationError(f"location {shown!r}: redis= must be a redis:// URL; {expected}")
    if "replication" not in query:
        return KafkaLocation(bootstrap, topic, redis_url)
    replication = query["replication"][0]
    if not replication.isdigit() or int(replication) < 1:
        raise LocationError(f"location {shown!r}: replication must be a positive integer")
    return KafkaLocation(bootstrap, topic, redis_url, int(replication))
