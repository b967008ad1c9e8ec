"""riftco-cffi-example: a third-party riftco backend written in C through cffi."""

from .backend import CffiBackend

__all__ = ["CffiBackend"]
