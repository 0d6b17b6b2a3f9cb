"""The conformance suite every backend subclasses (pytest; install ``qkernels[test]``).

Subclass :class:`BackendConformance`, set ``backend`` (and ``device``/``emulate`` for GPU backends), and
optionally narrow ``cases``/``dtypes``. Every case is either served within the dtype's tolerance of the
float reference (batch 1 and 32, bias or not) or refused with reasons by an explicit request; a backend
cannot pass by refusing what it declares.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from ..build import quant_linear, quant_linear_from_weight, repack
from ..checkpoint import load_checkpoint, pack_weight
from ..errors import BackendRefusedError, KernelInputError
from ..module import QuantLinear
from ..registry import get_backend
from ..selection import probe, select
from .cases import LayerCase, float_reference, make_activations, make_bias, make_weight, tolerance

# A spread of layers: every GPTQ/AWQ family layout, bits 2..8, group sizes incl. per-channel, act-order,
# a partial last group, asymmetric zero points, with and without bias, odd and aligned shapes.
STANDARD_CASES: tuple[LayerCase, ...] = (
    LayerCase("gptq_v2", 4, 32, False, 64, 256, bias=True),
    LayerCase("gptq_v2", 4, 64, True, 48, 256, act_order=True),
    LayerCase("gptq_v2", 4, 32, False, 32, 128, act_order=True, bias=True),
    LayerCase("gptq", 4, 64, True, 32, 192),
    LayerCase("gptq", 4, 32, False, 32, 128, bias=True),
    LayerCase("gptq_v2", 4, -1, False, 32, 128),
    LayerCase("gptq_v2", 4, 32, False, 32, 80, bias=True),
    LayerCase("gptq_v2", 4, 128, False, 32, 192, bias=True),
    LayerCase("gptq_v2", 4, 128, False, 32, 320, act_order=True),
    LayerCase("gptq_v2", 2, 32, False, 32, 128),
    LayerCase("gptq_v2", 3, 32, True, 32, 128, bias=True),
    LayerCase("gptq_v2", 8, 64, False, 32, 128),
    LayerCase("gptq_p", 5, 32, False, 32, 128),
    LayerCase("gptq_p", 4, 32, True, 32, 128, act_order=True),
    LayerCase("gemm", 4, 32, False, 64, 128, bias=True),
    LayerCase("gemm", 4, 128, True, 32, 256),
    LayerCase("gemm", 4, 64, False, 24, 128),
    LayerCase("gemv", 4, 32, False, 32, 128),
    LayerCase("gemv_fast", 4, 64, False, 32, 128, bias=True, pack_dtype="int16"),
    LayerCase("llm-awq", 4, 32, True, 32, 128, pack_dtype="int16"),
    LayerCase("marlin", 4, 128, True, 128, 256, method="gptq"),
    LayerCase("marlin", 8, -1, True, 128, 128, bias=True, method="gptq"),
    LayerCase("awq_marlin", 4, 64, True, 128, 128),
    LayerCase("gguf", 4, 32, True, 32, 96),
    LayerCase("gguf", 8, 32, True, 32, 64, bias=True),
)

ALL_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)


def packed_case(case: LayerCase) -> tuple[dict[str, np.ndarray], Any]:
    """(checkpoint tensors incl. optional bias, LayoutMeta) of ``case`` laid out in its format."""
    return pack_weight(make_weight(case), case.fmt, bias=make_bias(case), pack_dtype=case.pack_dtype)


class BackendConformance:
    """Base class of every backend's conformance tests (see the module docstring)."""

    backend: ClassVar[str]
    device: ClassVar[str] = "cpu"
    emulate: ClassVar[bool] = False
    cases: ClassVar[tuple[LayerCase, ...]] = STANDARD_CASES
    dtypes: ClassVar[tuple[torch.dtype, ...]] = ALL_DTYPES
    batches: ClassVar[tuple[int, ...]] = (1, 32)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "case" in metafunc.fixturenames:
            metafunc.parametrize("case", self.cases, ids=str)
        if "dtype" in metafunc.fixturenames:
            metafunc.parametrize("dtype", self.dtypes, ids=lambda d: str(d).replace("torch.", ""))

    # -- helpers ---------------------------------------------------------------------------------
    def build(self, case: LayerCase, dtype: torch.dtype) -> QuantLinear:
        tensors, meta = packed_case(case)
        return quant_linear(
            case.fmt, tensors, meta, backend=self.backend, device=self.device, dtype=dtype,
            method=case.method, emulate=self.emulate,
        )  # fmt: skip

    def served_case(self) -> LayerCase:
        """The first case this backend serves here; a host that can serve none (no GPU, no toolchain) skips
        the tests that need a built module, naming why (the refusal test still runs for every case)."""
        for case in self.cases:
            if not self.reasons(case, self.dtypes[0]):
                return case
        pytest.skip(f"{self.backend} serves no case on this host: {self.reasons(self.cases[0], self.dtypes[0])}")

    def reasons(self, case: LayerCase, dtype: torch.dtype) -> tuple[str, ...]:
        tensors, meta = packed_case(case)
        loaded = load_checkpoint(case.fmt, tensors, meta, method=case.method)
        answer = probe(loaded.contract, self.device, dtype, backend=self.backend, emulate=self.emulate)
        return answer[get_backend(self.backend).NAME] + tuple(get_backend(self.backend).weight_reasons(loaded.logical))

    # -- the suite -------------------------------------------------------------------------------
    def test_matches_float_reference_or_refuses(self, case: LayerCase, dtype: torch.dtype) -> None:
        reasons = self.reasons(case, dtype)
        if reasons:
            with pytest.raises(BackendRefusedError) as info:
                self.build(case, dtype)
            assert info.value.reasons, "a refusal must carry its reasons"
            return
        module = self.build(case, dtype)
        assert module.NAME == get_backend(self.backend).NAME
        weight, bias = make_weight(case), make_bias(case)
        for batch in self.batches:
            x = make_activations(case, batch, dtype)
            y = module(x.to(module.target.torch_device)).cpu()
            assert y.dtype == dtype and y.shape == (batch, case.out_features)
            err = (y.double() - float_reference(x, weight, bias)).abs()
            tol = tolerance(x, weight, bias, dtype)
            worst = float((err - tol).max())
            assert worst <= 0, f"{case} {dtype} batch {batch}: max error exceeds tolerance by {worst:.3g}"

    def test_checkpoint_tensors_survive_build_and_repack(self, case: LayerCase) -> None:
        dtype = self.dtypes[0]
        if self.reasons(case, dtype):
            return  # refusal is covered by the reference test above
        tensors, _ = packed_case(case)
        module = self.build(case, dtype)
        for got in (module.checkpoint_tensors(), repack(module, "torch", device="cpu").checkpoint_tensors()):
            assert sorted(got) == sorted(tensors)
            for name, arr in tensors.items():
                assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr), name
        persistent = {k for k in module.state_dict()}
        assert persistent == set(tensors), "state_dict must hold exactly the checkpoint tensors"

    def test_repack_from_reference_gives_same_outputs(self, case: LayerCase) -> None:
        dtype = self.dtypes[0]
        if self.reasons(case, dtype):
            return
        reference = quant_linear_from_weight(
            make_weight(case), case.fmt, bias=make_bias(case), pack_dtype=case.pack_dtype, backend="torch",
            method=case.method,
        )  # fmt: skip
        module = repack(reference, self.backend, device=self.device, dtype=dtype, emulate=self.emulate)
        assert module.NAME == get_backend(self.backend).NAME
        x = make_activations(case, 4, dtype)
        y = module(x.to(module.target.torch_device)).cpu().double()
        err = (y - float_reference(x, make_weight(case), make_bias(case))).abs()
        assert float((err - tolerance(x, make_weight(case), make_bias(case), dtype)).max()) <= 0

    def test_rejects_bad_activations(self) -> None:
        case = self.served_case()
        module = self.build(case, self.dtypes[0])
        dev = module.target.torch_device
        with pytest.raises(KernelInputError, match="last dim"):
            module(torch.zeros(2, case.in_features + 1, dtype=self.dtypes[0], device=dev))
        with pytest.raises(KernelInputError, match="float64"):
            module(torch.zeros(2, case.in_features, dtype=torch.float64, device=dev))

    def test_leading_dims_are_kept(self) -> None:
        case = self.served_case()
        module = self.build(case, self.dtypes[0])
        x = make_activations(case, 6, self.dtypes[0]).reshape(2, 3, case.in_features)
        y = module(x.to(module.target.torch_device)).cpu()
        assert y.shape == (2, 3, case.out_features)
        flat = module(x.reshape(6, -1).to(module.target.torch_device)).cpu()
        assert torch.equal(y.reshape(6, -1), flat)

    def test_selection_names_this_backend_when_forced(self) -> None:
        case = self.served_case()
        tensors, meta = packed_case(case)
        loaded = load_checkpoint(case.fmt, tensors, meta, method=case.method)
        chosen = select(loaded.contract, self.device, self.dtypes[0], backend=self.backend, emulate=self.emulate)
        assert chosen.backend == get_backend(self.backend).NAME and chosen.rejected == ()
