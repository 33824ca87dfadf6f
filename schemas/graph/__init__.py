"""Wire models of the memory, intent and task graphs: items, edges, commands, filters, envelopes."""
