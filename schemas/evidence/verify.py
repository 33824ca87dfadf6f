"""Verifying a log against signed checkpoints, whatever stores it: the judgement of a
re-hashed tree against the checkpoints the log holds and those an auditor kept.

Pure: the adapters re-hash their records (`producers.logs.sqlite_evidence`,
`producers.logs.kafka_evidence`) and hand over the tree and a reader of stored notes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.evidence.merkle import MerkleTree
from schemas.evidence.note import MAX_NOTE_BYTES, Checkpoint, NoteError, NoteVerifier
from schemas.evidence.proof import EvidenceMismatchError

__all__ = ["VerifyReport", "Found", "judge", "note_text", "unsigned_checkpoint"]


def note_text(raw: object, where: str) -> str:
    """A stored note's text, bounded and UTF-8 (it is read from a file anyone may edit)."""
    if type(raw) is not bytes or len(raw) > MAX_NOTE_BYTES:
        raise EvidenceMismatchError(f"{where}: the stored checkpoint is not a note")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise EvidenceMismatchError(f"{where}: the stored checkpoint is not UTF-8") from None


def unsigned_checkpoint(note: str, where: str) -> Checkpoint:
    """The checkpoint a note claims, its signature unchecked (the prover has no key)."""
    body, sep, _ = note.partition("\n\n")
    try:
        if not sep:
            raise NoteError("no signature lines")
        return Checkpoint.parse(body + "\n")
    except NoteError as exc:
        raise EvidenceMismatchError(f"{where}: malformed checkpoint: {exc}") from None


@dataclass
class VerifyReport:
    """What a log's verification (`verify_sqlite_log`, `verify_kafka_log`) found.

    `problem` is None when the log agrees with every checkpoint checked; else it says what
    is wrong, and `first_bad_seq` names the first seq that disagrees (None when the fault
    is a checkpoint's own, e.g. its signature)."""

    location: str
    origin: str | None
    size: int = 0
    root: bytes = b""
    stored_checkpoints: int = 0
    signatures_checked: list[int] = field(default_factory=list)
    latest_verified: int | None = None
    first_bad_seq: int | None = None
    problem: str | None = None
    # The records after the largest signed size checked: appended since (by a writer
    # without a key, or not yet signed), so nothing vouches for them yet.
    covered: int = 0

    @property
    def ok(self) -> bool:
        return self.problem is None


class Found(Exception):
    """A fault found: ends the verification with it."""

    def __init__(self, problem: str, first_bad_seq: int | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.first_bad_seq = first_bad_seq


def judge(
    report: VerifyReport,
    tree: MerkleTree,
    gap: str | None,
    sizes: list[int],
    verifier: NoteVerifier,
    external: list[tuple[str, str]],
    all_signatures: bool,
    note_at: Callable[[int], object],
) -> None:
    """Check `tree` (the re-hashed log; `gap`: where its seqs stop being dense) against
    the stored checkpoints (`sizes`, each one's raw note from `note_at(size)`) and the
    `external` ones, filling `report`; raises `Found` with the fault. Every checkpoint
    relied on has its signature checked by `verifier`: the latest stored, each external
    one, and the two that bound the first disagreement (found by bisection over `sizes`);
    with `all_signatures`, every stored one."""
    origin = report.origin
    n = tree.size

    def open_checked(note: str, where: str) -> Checkpoint:
        try:
            checkpoint = Checkpoint.open(note, verifier, origin=origin or None)
        except NoteError as exc:
            text = str(exc)
            if "does not verify" in text:
                why = f"{text}: the checkpoint is forged or was altered"
            elif "not signed by" in text:
                why = (
                    f"{text} (key {verifier.text()}): a wrong key, or a checkpoint "
                    "forged with another key"
                )
            else:
                why = text
            raise Found(f"{where}: {why}") from None
        report.signatures_checked.append(checkpoint.size)
        return checkpoint

    def stored(size: int) -> Checkpoint:
        raw = note_at(size)
        where = f"the checkpoint of size {size} stored in the log"
        try:
            note = note_text(raw, where)
        except EvidenceMismatchError as exc:
            raise Found(str(exc)) from None
        checkpoint = open_checked(note, where)
        if checkpoint.size != size:
            raise Found(f"{where}: its signed text says size {checkpoint.size}")
        return checkpoint

    def agrees(checkpoint: Checkpoint) -> bool:
        return checkpoint.size <= n and tree.root(checkpoint.size) == checkpoint.root

    def root_agrees(size: int) -> bool:
        """Whether the stored checkpoint of `size` claims the log's root (unsigned read)."""
        if size > n:
            return False
        try:
            claimed = unsigned_checkpoint(note_text(note_at(size), ""), "")
        except EvidenceMismatchError:
            return False
        return claimed.root == tree.root(size)

    if origin is None and external:
        # A log no writer with a key touched: its origin is in the external checkpoints.
        body = external[0][1].partition("\n\n")[0] + "\n"
        try:
            origin = report.origin = Checkpoint.parse(body).origin
        except NoteError as exc:
            raise Found(f"{external[0][0]}: {exc}") from None
    authenticated: list[Checkpoint] = [open_checked(note, where) for where, note in external]
    if sizes:
        latest = stored(sizes[-1])
        report.latest_verified = latest.size
        authenticated.append(latest)
    if all_signatures:
        authenticated.extend(stored(size) for size in sizes[:-1])
    if not authenticated:
        raise Found(
            "no signed checkpoint to check the log against: none is stored in it (no writer "
            "with a signing key has committed) and none was given (--checkpoint)"
        )
    bad = sorted((c for c in authenticated if not agrees(c)), key=lambda c: c.size)
    if not bad:
        if gap is not None:  # records after a gap no checkpoint covers: still a fault
            raise Found(gap, n)
        report.covered = max(c.size for c in authenticated)
        return
    first = bad[0]
    # The first stored checkpoint that disagrees: with genuine checkpoints, every one
    # from the first altered record on disagrees, and every one before agrees.
    lo = bisect.bisect_left(sizes, 1)
    hi = bisect.bisect_left(sizes, first.size)
    while lo < hi:
        mid = (lo + hi) // 2
        if root_agrees(sizes[mid]):
            lo = mid + 1
        else:
            hi = mid
    if lo < len(sizes) and sizes[lo] < first.size:
        candidate = stored(sizes[lo])  # the bound is relied on: its signature is checked
        if not agrees(candidate):
            first = candidate
    below = bisect.bisect_left(sizes, first.size)
    good = 0
    if below:
        prior = stored(sizes[below - 1])  # relied on as the last good one: checked
        if not agrees(prior):
            raise Found(
                f"the checkpoint of size {prior.size} disagrees with the log, yet the "
                "stored checkpoints between do not: the checkpoints were reordered"
            )
        good = prior.size
    for c in authenticated:
        if agrees(c) and good < c.size < first.size:
            good = c.size
    last = min(first.size, n) - 1
    span = f"seq {good}" if last <= good else f"seq {good} to {last}"
    if first.size > n:
        most = max(c.size for c in authenticated)  # signed: that many records existed
        missing = f"seq {n} to {most - 1}" if most - 1 > n else f"seq {n}"
        cause = gap or f"the log ends at {n} records"
        if good >= n:
            raise Found(
                f"{missing} missing: {cause}, but a signed checkpoint covers {most} "
                "records (the log was truncated)",
                n,
            )
        raise Found(
            f"{span} disagree with the signed checkpoint of size {first.size}, and {missing} "
            f"missing ({cause}); the checkpoint of size {good} agrees",
            good,
        )
    raise Found(
        f"{span}: the log's records disagree with the signed checkpoint of size "
        f"{first.size} (the checkpoint of size {good} agrees): a record was altered, "
        "replaced or moved",
        good,
    )
