"""schemas package."""

from schemas.validation import *  # noqa: F401,F403
