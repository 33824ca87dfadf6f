"""Pure cryptographic formats: the sealed content of an encrypted log (`envelope`)."""
