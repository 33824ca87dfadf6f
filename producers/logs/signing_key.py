"""The log's signing key: an Ed25519 key in a file kept outside the log.

A key file holds one line, the signer key as Go's ``golang.org/x/mod/sumdb/note`` writes
one (``PRIVATE+KEY+NAME+KEYID+BASE64``), so Go's tools can use the same file; it is
created with mode 0600 and never overwritten. Where a writer finds its key, first match:

1. the ``key=`` given to `Memory` (a path, or a `NoteSigner`; ``False``: sign nothing);
2. the file ``$MEMSTREAM_SIGNING_KEY`` names (it must exist);
3. ``$XDG_CONFIG_HOME/memstream/signing.key`` (``~/.config/...``), when it exists.

A verifier needs the public half only, as a note verifier key
(``NAME+KEYID+BASE64``): `load_verifier` takes that text, a file holding it, or a key file.
"""

from __future__ import annotations

import os
import socket
from os import PathLike
from pathlib import Path
from typing import Union

from schemas.errors import MemstreamError
from schemas.evidence.note import NoteError, NoteSigner, NoteVerifier

__all__ = [
    "KEY_ENV",
    "SigningKeyError",
    "KeySpec",
    "default_key_path",
    "default_key_name",
    "init_key",
    "load_signer",
    "resolve_signer",
    "load_verifier",
]

KEY_ENV = "MEMSTREAM_SIGNING_KEY"
_MAX_KEY_FILE = 4096

# What `Memory(key=...)` takes: a path, a signer, False (none), or None (the default).
KeySpec = Union[str, "PathLike[str]", NoteSigner, bool, None]


class SigningKeyError(MemstreamError, ValueError):
    """A signing or verifier key that is missing, unreadable or malformed; the message
    names the file (never the key)."""


def default_key_path() -> Path:
    """``$MEMSTREAM_SIGNING_KEY``, else ``$XDG_CONFIG_HOME/memstream/signing.key``."""
    named = os.environ.get(KEY_ENV)
    if named:
        return Path(named).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "memstream" / "signing.key"


def default_key_name() -> str:
    """``memstream@HOST``: a name for the key that says whose it is (no spaces, no '+')."""
    host = "".join(c for c in socket.gethostname() if c.isalnum() or c in ".-_") or "localhost"
    return f"memstream@{host}"


def init_key(path: str | PathLike[str] | None = None, name: str | None = None) -> NoteSigner:
    """Make a new key in `path` (mode 0600, its directory 0700 when made); `SigningKeyError` if
    the file exists: a key is never overwritten, as logs signed with it need it."""
    file = Path(path) if path is not None else default_key_path()
    try:
        signer = NoteSigner.generate(name or default_key_name())
    except NoteError as exc:
        raise SigningKeyError(f"key name {name!r}: {exc}") from None
    try:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_EXCL: refuses an existing file (or a link) atomically, whoever else races us.
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SigningKeyError(
            f"key file {file} exists: not overwritten (logs signed with it need it); "
            "remove it yourself, or choose another path with --key"
        ) from None
    except OSError as exc:
        raise SigningKeyError(f"key file {file}: cannot create it: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as out:
        out.write(signer.text() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return signer


def _read(file: Path) -> str:
    try:
        with open(file, "rb") as f:
            data = f.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise SigningKeyError(f"key file {file}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > _MAX_KEY_FILE:
        raise SigningKeyError(f"key file {file}: over {_MAX_KEY_FILE} bytes: not a key file")
    try:
        return data.decode().strip()
    except UnicodeDecodeError:
        raise SigningKeyError(f"key file {file}: not text: not a key file") from None


def load_signer(path: str | PathLike[str]) -> NoteSigner:
    """The signer in key file `path`; `SigningKeyError` naming the file otherwise. A key file
    others can read is refused: the key would no longer prove anything."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        raise SigningKeyError(
            f"key file {file} does not exist (make one with `memstream keys init`)"
        ) from None
    except OSError as exc:
        raise SigningKeyError(f"key file {file}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise SigningKeyError(
            f"key file {file} is readable by others (mode {mode & 0o777:o}); chmod 600 {file}"
        )
    try:
        return NoteSigner.parse(_read(file))
    except NoteError as exc:
        raise SigningKeyError(f"key file {file}: {exc}") from None


def resolve_signer(key: KeySpec = None) -> NoteSigner | None:
    """The signer a writer uses (see the module's doc), or None: sign nothing."""
    if key is False:
        return None
    if isinstance(key, NoteSigner):
        return key
    if key is True or key is None:
        if os.environ.get(KEY_ENV):
            return load_signer(default_key_path())
        path = default_key_path()
        if key is True or path.is_file():
            return load_signer(path)
        return None
    return load_signer(key)


def load_verifier(spec: str | PathLike[str] | None = None) -> NoteVerifier:
    """A verifier key from its text (``NAME+KEYID+BASE64``), from a file holding it, or
    from a key file (its public half); None: the default key's public half."""
    if spec is None:
        signer = resolve_signer(True)
        assert signer is not None
        return signer.verifier
    text = str(spec)
    if "+" in text and not Path(text).exists():
        try:
            return NoteVerifier.parse(text)
        except NoteError as exc:
            raise SigningKeyError(f"verifier key: {exc}") from None
    file = Path(text)
    content = _read(file) if file.is_file() else None
    if content is None:
        raise SigningKeyError(f"key {text!r}: neither a verifier key nor a file")
    if content.startswith("PRIVATE+KEY+"):
        return load_signer(file).verifier
    try:
        return NoteVerifier.parse(content)
    except NoteError as exc:
        raise SigningKeyError(f"verifier key file {file}: {exc}") from None
