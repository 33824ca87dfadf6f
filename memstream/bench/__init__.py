"""`memstream bench SUITE`: figures side by side with the seed systems, from one run."""
