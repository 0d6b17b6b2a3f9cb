"""Triton kernels (imported lazily: whether they run compiled or interpreted is fixed at import)."""
