"""The C extension only; everything else about the package is in pyproject.toml.

projector/graph/_native.c holds the inner loops of get_scored_items; queryd/graph/scoring.py
holds their Python reference and falls back to it. No fused multiply-add, so the scores
stay Python's bit for bit. Optional: where nothing can compile it, the install goes on
and the Python loops run (tests/projector/graph/test_native.py fails there, by design).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "projector.graph._native",
            ["projector/graph/_native.c"],
            extra_compile_args=["-O2", "-ffp-contract=off", "-Wall"],
            optional=True,
        )
    ]
)
