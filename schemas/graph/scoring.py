"""Scoring inputs: ScoreWeights (unbounded multipliers) and DecayConfig."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field


class DecayConfig(BaseModel):
    """Time decay of a score. ``interval`` and ``type`` are any strings, as in the seed: an
    unknown one is a ValueError when a decay is computed, not at validation."""

    rate: Annotated[float, Field(ge=0.0, le=1.0)]
    interval: str
    type: str


class ScoreWeights(BaseModel):
    """Multipliers of the three scores, intentionally not bounded to 0..1."""

    authority: float | None = None
    conviction: float | None = None
    importance: float | None = None
    decay: DecayConfig | None = None


__all__ = ["DecayConfig", "ScoreWeights"]
