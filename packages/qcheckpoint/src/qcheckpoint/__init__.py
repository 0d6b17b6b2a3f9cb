"""Transactional, crash-proof checkpoint store and pickle-free continuation codec."""

__version__ = "0.1.0"

__all__ = ["__version__"]
