"""Key stores: where the data subjects' keys of an encrypted log live, and die."""
