"""Memory graph of seed 003 (see schemas.graph for its models)."""
