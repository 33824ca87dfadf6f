"""Wire models of the memory graph of seed 003: items, edges, commands, filters, envelopes."""
