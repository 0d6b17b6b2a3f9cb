"""The ATen int4 CPU backend: exact for asymmetric zeros and act-order; refuses what it cannot serve."""

from qkernels.testing.conformance import BackendConformance


class TestAtenInt4(BackendConformance):
    backend = "aten_int4"
