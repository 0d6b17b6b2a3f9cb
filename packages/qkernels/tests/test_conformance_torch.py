"""The torch reference backend passes the conformance suite on every standard case."""

from qkernels.testing.conformance import BackendConformance


class TestTorchReference(BackendConformance):
    backend = "torch"
