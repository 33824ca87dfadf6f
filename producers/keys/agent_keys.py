"""Agents' keys in one directory: ``NAME.key`` files, as `memstream agents create` writes them.

A service that appends for several agents (queryd's HTTP recall on a signed log) signs
each record as the agent it acts for, with that agent's own key, read from such a
directory (`AgentKeyring`). Holding the directory makes the service a custodian of those
keys: whatever it signs is provably "signed with agent X's key", so it is given only the
keys of the agents it serves (see the README, "Provable authorship").
"""

from __future__ import annotations

import re
import threading
from os import PathLike
from pathlib import Path

from producers.logs.signing_key import SigningKeyError, load_signer
from schemas.evidence.note import NoteSigner

__all__ = ["default_agent_keys_dir", "agent_key_file", "AgentKeyring"]


def default_agent_keys_dir() -> Path:
    """``~/.config/memstream/agents``: where `memstream agents create` writes by default."""
    return Path.home() / ".config" / "memstream" / "agents"


def agent_key_file(directory: str | PathLike[str], name: str) -> Path:
    """The key file of agent `name` in `directory`: ``NAME.key``, with characters other
    than letters, digits and ``.-_@`` written as ``_`` (``agent:alice`` ->
    ``agent_alice.key``)."""
    safe = re.sub(r"[^A-Za-z0-9.\-_@]", "_", name)
    return Path(directory) / f"{safe}.key"


class AgentKeyring:
    """The agent keys in `directory`, read when first asked for and again when their file
    changes. Every file is checked as `load_signer` checks one (mode 0600, a key file, at
    most 4 KiB), and the key's own name must be the agent's: a file of another agent's key
    under this name is refused, never used."""

    def __init__(self, directory: str | PathLike[str]) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, tuple[tuple[int, int, int], NoteSigner]] = {}
        self._lock = threading.Lock()

    def signer(self, name: str) -> NoteSigner | None:
        """Agent `name`'s key; None when the directory holds no key file for it.
        `SigningKeyError` (naming the file, never the key) for a file that is not
        `name`'s key."""
        file = agent_key_file(self.directory, name)
        try:
            info = file.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SigningKeyError(f"key file {file}: {exc.strerror or exc}") from None
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and cached[0] == stamp:
                return cached[1]
        signer = load_signer(file)
        if signer.name != name:
            raise SigningKeyError(
                f"key file {file} holds the key of {signer.name!r}, not of agent {name!r}"
            )
        with self._lock:
            self._cache[name] = (stamp, signer)
        return signer
