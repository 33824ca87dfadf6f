"""The memory, intent and task graphs: their states and the pure functions that change them.

Their models are in `schemas.graph`."""
