"""Turning an audit event into a log record's bytes and back."""

from __future__ import annotations

import json

from schemas.audit import BaseEvent, Deletion, Document, Message, Recall, event_from_dict

__all__ = ["encode_event", "decode_event"]


def encode_event(event: BaseEvent) -> bytes:
    """The record bytes of an event. `seq` is the log's to give, so it is not stored."""
    return event.model_dump_json(exclude={"seq"}).encode()


def decode_event(data: bytes, seq: int) -> Message | Document | Recall | Deletion:
    """The stored event a record holds, with the seq at which the log holds it."""
    fields = json.loads(data)
    fields["seq"] = seq
    return event_from_dict(fields)
