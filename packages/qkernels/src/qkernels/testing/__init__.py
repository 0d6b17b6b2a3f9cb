"""Test support for backend authors: layer cases and the conformance suite (needs the ``test`` extra)."""
