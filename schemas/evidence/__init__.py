"""The evidence a log gives about itself: its Merkle tree, proofs, and signed checkpoints.

Pure: hashing, proofs and the text formats only. The logs (adapters) feed the tree their
stored record bytes and keep the checkpoints; verifiers need nothing else.
"""
