"""Queries of the memory, intent and task graphs: pure functions of their states.

Their models are in `schemas.graph`."""
