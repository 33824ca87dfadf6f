"""Scoring inputs: ScoreWeights (unbounded multipliers) and DecayConfig."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from schemas.graph.aliases import DecayInterval, DecayType


class DecayConfig(BaseModel):
    """Time decay of a score; an unknown interval or type is a ValueError."""

    model_config = ConfigDict(frozen=True)

    rate: Annotated[float, Field(ge=0.0, le=1.0)]
    interval: DecayInterval
    type: DecayType


class ScoreWeights(BaseModel):
    """Multipliers of the three scores, intentionally not bounded to 0..1."""

    model_config = ConfigDict(frozen=True)

    authority: float | None = None
    conviction: float | None = None
    importance: float | None = None
    decay: DecayConfig | None = None


__all__ = ["DecayConfig", "ScoreWeights"]
