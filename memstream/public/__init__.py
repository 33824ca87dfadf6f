"""The names ``memstream`` exports, one module per part of the seeds' APIs.

``audit_memory``: the audit memory (seeds 000/001). ``memory_graph``: the memory graph of
seed 003. ``intents_tasks_store``: seed 003's intent and task graphs, transplant,
validation and ``MemexStore``.
"""
