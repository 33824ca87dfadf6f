"""`memstream demo`: a scripted session of several agents on the embedded default."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from producers.memory import Memory
from schemas.audit import Deletion, Document, Erasure, Message, Recall

__all__ = ["register", "run"]


def _describe(event: Message | Document | Recall | Deletion | Erasure) -> str:
    if isinstance(event, Message):
        return f"{event.speaker}: {event.content}"
    if isinstance(event, Document):
        return f"document {event.name!r} ({len(event.text)} chars)"
    if isinstance(event, Recall):
        return f"recall {event.query!r} -> {len(event.recalled)} item(s)"
    if isinstance(event, Erasure):
        return f"erase {event.subject!r}: {len(event.erased)} item(s) because {event.reason!r}"
    targets = ", ".join(str(t)[:8] for t in event.targets)
    return f"delete {targets} because {event.reason!r}"


def run(args: argparse.Namespace) -> int:
    console = Console()
    keep = args.path is not None
    path = Path(args.path) if keep else Path(tempfile.mkdtemp(prefix="memstream-demo-"))
    try:
        # Encrypted, so the customer's data can be erased at the end (crypto-shredding).
        with Memory(path, encrypt=True) as memory:
            console.print(f"[bold]memstream demo[/] on the embedded log at {path}")
            session = "support-42"
            planner = memory.add_message(
                Message(
                    speaker="planner",
                    content="The customer wants the invoice for order 1017",
                    session_id=session,
                    actor="agent:planner",
                    source="chat",
                )
            )
            memory.add_message(
                Message(
                    speaker="researcher",
                    content="Order 1017 shipped on Monday via courier",
                    session_id=session,
                    actor="agent:researcher",
                    source="chat",
                )
            )
            card = memory.add_message(
                Message(
                    speaker="customer",
                    content="My card number for the invoice is 4111 1111",
                    # The customer's own session: its data subject, erasable on its own.
                    session_id="customer:ana",
                    actor="user:ana",
                    source="chat",
                )
            )
            memory.add_document(
                Document(
                    name="refund-policy.txt",
                    text="Invoices are issued within two days of an order shipping",
                    session_id=session,
                    actor="agent:researcher",
                    source="upload",
                )
            )
            before_deletion = memory.replay().last_seq

            recall, items = memory.recall(
                "invoice for order 1017", session_id=session, actor="agent:writer"
            )
            console.print(
                f"\nagent:writer recalled {len(items)} item(s) for "
                f"{recall.query!r} (Recall logged at seq {recall.seq}):"
            )
            for item in items:
                console.print(f"  seq {item.seq}: {_describe(item)}")

            memory.delete(
                [card.id],
                "card number must not be kept",
                requested_by="agent:compliance",
                session_id=session,
            )
            _, after = memory.recall(
                "card number invoice", session_id=session, actor="agent:writer"
            )
            console.print(
                f"\nafter the deletion, a recall returns seqs "
                f"{[i.seq for i in after]}: the card message is gone from reads"
            )
            kept = memory.get(card.id)
            assert isinstance(kept, Message)
            console.print(f"get() still returns it from the log: {kept.content!r}")
            erasure = memory.erase(
                "customer:ana", "GDPR art. 17: the customer asked", requested_by="user:ana"
            )
            erased = memory.get(card.id)
            assert isinstance(erased, Message) and isinstance(erasure, Erasure)
            console.print(
                f"after erase('customer:ana') (Erasure at seq {erasure.seq}, the key "
                f"destroyed): get() returns {escape(repr(erased.content))}; the stored record "
                f"is unchanged (leaf hash {erasure.leaf_hashes[0][:16]}...), so the log's "
                "proofs still verify"
            )

            table = Table(title="audit trail")
            for column in ("seq", "kind", "actor", "what"):
                table.add_column(column)
            for event in memory.events():
                table.add_row(
                    str(event.seq), event.kind, event.actor or "-", escape(_describe(event))
                )
            console.print(table)

            past = memory.replay(up_to_seq=before_deletion)
            now = memory.replay()
            console.print(
                f"replay(up_to_seq={before_deletion}): {len(past.visible_messages)} visible "
                f"messages, {len(past.deleted)} deleted; at the head (seq {now.last_seq}): "
                f"{len(now.visible_messages)} visible, {len(now.deleted)} deleted"
            )
            stats = now.recall_stats[planner.id]
            console.print(f"the planner's message was recalled {stats.num_recalled} time(s)")
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "demo", help="run a scripted multi-agent session on the embedded log and print it"
    )
    parser.add_argument("--path", help="keep the log in this directory (default: a temp dir)")
    parser.set_defaults(func=run)
