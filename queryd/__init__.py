"""queryd package."""
