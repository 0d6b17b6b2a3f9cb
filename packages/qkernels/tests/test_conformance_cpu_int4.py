"""The AVX2 CPU int4 backend (compiled on first use) against the float reference."""

from qkernels.testing.conformance import BackendConformance


class TestCpuInt4(BackendConformance):
    backend = "cpu_int4"
