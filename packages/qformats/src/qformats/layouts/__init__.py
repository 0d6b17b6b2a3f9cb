"""Checkpoint layouts: one module per layout, each registered under its FORMAT key."""
