"""Checks for the data steps."""

from .core import check, expect  # noqa: F401
