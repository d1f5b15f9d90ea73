"""Checks for the evals steps."""

from .core import check, expect  # noqa: F401
