"""Checks for the optim steps."""

from .core import check, expect  # noqa: F401
