"""The one-projector-per-log lease in Redis, renewed atomically with the status record.

The lease is a key holding its owner's id, with a time to live. `renew` runs one Lua
script (shipped here, registered with redis-py's `register_script`): if the key holds this
owner, extend it; if no one holds it, take it; if another owner holds it, report the lease
lost. In the same script, while the lease is held, the projector's status record
(`projector.status`) is written with its own time to live, so a status is never written by
a projector that does not hold the lease.

The lease is what tells projectors to wait for each other; what makes a projector that
lost it harmless is the fencing behind it (the lifecycle producer's transactional epoch,
and snapshot writes checked against the lease key in the same MULTI).
"""

from __future__ import annotations

import redis

__all__ = ["Lease"]

# KEYS: lease, status. ARGV: owner, lease ms, status bytes ("" for none), status ttl ms.
_RENEW = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  return 0
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
end
return 1
"""

# KEYS: lease, status. ARGV: owner.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
"""


class Lease:
    """One owner's view of a log's projector lease (raises redis errors: callers retry)."""

    def __init__(
        self, client: redis.Redis, key: str, status_key: str, owner: str, ttl_ms: int
    ) -> None:
        self.key = key
        self.status_key = status_key
        self.owner = owner
        self.ttl_ms = ttl_ms
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def renew(self, status: bytes = b"", status_ttl_ms: int = 0) -> bool:
        """Extend the lease, or take it when free, writing `status` while held; False when
        another owner holds it."""
        held = self._renew(
            keys=[self.key, self.status_key],
            args=[self.owner, self.ttl_ms, status, max(1, status_ttl_ms)],
        )
        return held == 1

    def release(self) -> bool:
        """Give the lease up (and drop the status record) if this owner holds it."""
        return self._release(keys=[self.key, self.status_key], args=[self.owner]) == 1
