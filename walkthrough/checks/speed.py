"""Checks for the speed steps."""

from .core import check, expect  # noqa: F401
