"""The graph half of an erasure receipt: which items' content an erasure made unreadable.

An `Erasure` names audit events only (its ids are looked up in the audit state). Graph
items' content is sealed under the same subject keys (`schemas.crypto.graph_content`), so
an erasure that destroys a subject's key also appends, in the same transaction, one
operation envelope of type ``memstream.erase_content`` whose payload is a `GraphErasure`:
the subject, the items whose content the destroyed key sealed, and the seq and Merkle leaf
hash of each stored record that held such content. Never content. The fold replaces every
content value of each named item with ``ERASED`` (`projector.record_fold`), on every
reader alike, so the state says what the log says.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from schemas.audit import check_leaf_hashes

__all__ = ["GraphErasure"]

_NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class GraphErasure(BaseModel):
    """The payload of a ``memstream.erase_content`` envelope."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: _NonEmpty
    items: tuple[_NonEmpty, ...] = Field(min_length=1)
    seqs: tuple[Annotated[int, Field(ge=0)], ...] = Field(min_length=1)
    leaf_hashes: tuple[str, ...] = Field(min_length=1)
    reason: _NonEmpty
    requested_by: str | None = None
    # The audit `Erasure` appended with it, when the subject had audit content too.
    erasure_id: UUID | None = None

    @model_validator(mode="after")
    def _hashes_match(self) -> GraphErasure:
        check_leaf_hashes(self.leaf_hashes, len(self.seqs), "seqs")
        return self

    def to_payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
