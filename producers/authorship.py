"""An auditor's check of a log's authorship, from the log's records and admin keys alone.

`verify_authorship` reads every record of a log (embedded or Kafka: the log itself, never
a snapshot) and folds it from seq 0 with the one fold every reader uses, which checks
each signed record against the enrolment state at its seq (`projector.authorship`). It
reports whether the log requires signatures, its admins (and whether they are the keys the
auditor holds), the enrolment history, how many records carry a valid signature, and every
record the fold refused for its authorship, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike

from producers.logs import open_log
from projector.authorship import Authorship
from projector.record_fold import Rejection, empty_state, fold_record
from schemas.evidence.note import NoteVerifier
from schemas.signing import SIGNED_MAGIC

__all__ = ["AuthorshipReport", "verify_authorship"]


@dataclass
class AuthorshipReport:
    location: str
    size: int
    authorship: Authorship | None
    signed_records: int = 0  # records whose signature verified at their seq
    refused: list[Rejection] = field(default_factory=list)  # refused for their authorship
    other_rejections: int = 0
    # None: no admin keys given to compare; else whether the log's admins are exactly them.
    admins_match: bool | None = None
    problem: str | None = None

    @property
    def signed(self) -> bool:
        return self.authorship is not None

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_authorship(
    location: str | PathLike[str],
    admins: list[NoteVerifier] | None = None,
    *,
    timeout: float = 5.0,
) -> AuthorshipReport:
    """Fold the whole log from its records and report its authorship (see the module)."""
    log = open_log(location, create=False)
    try:
        head = log.head()
        # An encrypted log's receipts (an Erasure, its graph half) are folded as its readers
        # fold them, not refused.
        erasable = getattr(log, "keys", None) is not None
        state = empty_state()
        signed = 0
        if head is not None:
            for seq, data in log.records(0, timeout=timeout):
                before = len(state.rejections)
                state = fold_record(state, seq, data, erasable=erasable).state
                if len(state.rejections) == before and data[:2] == SIGNED_MAGIC:
                    signed += 1
                if seq >= head:
                    break
    finally:
        log.close()
    report = AuthorshipReport(str(location), 0 if head is None else head + 1, state.authorship)
    report.signed_records = signed
    report.refused = [r for r in state.rejections if r.error == "AuthorshipError"]
    report.other_rejections = len(state.rejections) - len(report.refused)
    if state.next_seq != report.size:
        report.problem = f"read {state.next_seq} of {report.size} records"
    if admins is not None:
        held = {a.text() for a in admins}
        # The admins the log was created with: the root of trust an auditor holds. A
        # rotation later in the log is signed by an admin key valid at its seq, so the
        # keys as created vouch for every key after them.
        have = (
            set()
            if state.authorship is None
            else {key for _, action, _, key in state.authorship.history if action == "admin"}
        )
        report.admins_match = held == have
        if not report.admins_match:
            report.problem = (
                "the log does not require signatures"
                if state.authorship is None
                else "the log's admin keys (as created) are not the ones given: "
                + ", ".join(sorted(have))
            )
    return report
