"""Module behaviour: repack, cached dense weights, the ATen offset term, registry rules, error hierarchy."""

import os

import numpy as np
import pytest
import qkernels
import torch
from qkernels import (
    BackendRefusedError,
    Capabilities,
    DuplicateBackendError,
    QuantLinear,
    UnknownBackendError,
    get_backend,
    quant_linear,
    quant_linear_from_weight,
    register_backend,
    repack,
    select,
)
from qkernels.checkpoint import pack_weight
from qkernels.cpu_extension import extension_reasons
from qkernels.testing.cases import LayerCase, float_reference, make_activations, make_weight

ASYM = LayerCase("gptq_v2", 4, 32, False, 32, 128)
NO_CPU_EXTENSION = "; ".join(extension_reasons())
if NO_CPU_EXTENSION and os.environ.get("LOWBIT_REQUIRE_CPU_EXTENSION"):
    raise RuntimeError(f"LOWBIT_REQUIRE_CPU_EXTENSION is set but cpu_int4 cannot build: {NO_CPU_EXTENSION}")
needs_cpu_extension = pytest.mark.skipif(bool(NO_CPU_EXTENSION), reason=f"cpu_int4 unavailable: {NO_CPU_EXTENSION}")


def test_repack_to_the_same_backend_returns_the_module() -> None:
    m = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", dtype=torch.bfloat16, backend="aten_int4")
    assert m.NAME == "aten_int4"
    assert repack(m, "aten_int4") is m
    auto = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", dtype=torch.bfloat16)
    assert repack(auto) is auto


@needs_cpu_extension
def test_repack_keeps_the_v1_checkpoint_layout() -> None:
    case = LayerCase("gptq", 4, 32, False, 32, 128)
    tensors, meta = pack_weight(make_weight(case), "gptq")
    m = quant_linear("gptq", tensors, meta, dtype=torch.bfloat16)
    moved = repack(repack(repack(m, "torch"), "aten_int4"), "cpu_int4")
    for name, arr in tensors.items():
        assert np.array_equal(moved.checkpoint_tensors()[name], arr), name
    x = make_activations(case, 3, torch.float32)
    assert torch.allclose(repack(m, "torch")(x), float_reference(x, make_weight(case), None).float(), atol=1e-4)


def test_repack_to_a_backend_that_cannot_serve_is_refused() -> None:
    m = quant_linear_from_weight(make_weight(LayerCase("gptq_v2", 3, 32, True, 32, 128)), "gptq_v2")
    for name in ("aten_int4", "cpu_int4"):
        with pytest.raises(BackendRefusedError, match="bits 3"):
            repack(m, name)


def test_selection_is_recorded_on_the_module() -> None:
    m = quant_linear_from_weight(make_weight(LayerCase("gptq_v2", 8, 32, True, 32, 128)), "gptq_v2")
    assert m.selection.backend == "torch" == m.NAME
    assert any(c.name == "aten_int4" for c in m.selection.rejected)


def test_cached_dense_weight_is_reused_and_dropped_on_moves() -> None:
    m = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", backend="torch", cache_dense=True)
    x = make_activations(ASYM, 2, torch.float32)
    first = m(x)
    assert len(m._cache) == 1
    cached = next(iter(m._cache.values()))
    assert torch.equal(m(x), first) and next(iter(m._cache.values())) is cached
    m.to(torch.float32)  # any move invalidates the cache
    assert m._cache == {}
    plain = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", backend="torch")
    assert torch.equal(plain(x), first) and plain._cache == {}


def test_reference_dense_weight_is_bit_identical_to_the_logical_dequantization() -> None:
    m = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", backend="torch")
    assert torch.equal(m.dense_weight(), torch.from_numpy(make_weight(ASYM).dequantize()))


def test_aten_offset_carries_asymmetric_zeros() -> None:
    # The op computes s * (q - 8) + offset: offset (8 - z) * s is exact, a zero offset is not.
    w = make_weight(ASYM)
    m = quant_linear_from_weight(w, "gptq_v2", backend="aten_int4", dtype=torch.float32)
    x = make_activations(ASYM, 4, torch.float32)
    ref = float_reference(x, w, None).float()
    assert torch.allclose(m(x), ref, atol=1e-4, rtol=1e-5)
    zero_offset = m._scale_offset.clone()
    zero_offset[..., 1] = 0
    wrong = torch.ops.aten._weight_int4pack_mm_for_cpu(x, m._packed, 32, zero_offset)
    assert (wrong - ref).abs().max() > 0.1


def test_output_dtype_follows_activations_and_bias_is_added() -> None:
    case = LayerCase("gptq_v2", 4, 32, True, 32, 128, bias=True)
    bias = np.linspace(-1, 1, 32).astype(np.float16)
    m = quant_linear_from_weight(make_weight(case), "gptq_v2", bias=bias, backend="torch")
    x = make_activations(case, 2, torch.float16)
    y = m(x)
    assert y.dtype == torch.float16
    assert torch.allclose(y.float(), float_reference(x, make_weight(case), bias).float(), atol=2e-2)


def test_backend_names_are_unique_and_auto_is_reserved() -> None:
    with pytest.raises(DuplicateBackendError):
        register_backend(get_backend("torch"))
    with pytest.raises(UnknownBackendError) as info:
        get_backend("nope")
    assert isinstance(info.value, KeyError) and "known:" in str(info.value)

    class Auto(QuantLinear):
        NAME = "auto"
        CAPS = get_backend("torch").CAPS

    with pytest.raises(DuplicateBackendError, match="reserved"):
        register_backend(Auto)


class ExplicitOnly(QuantLinear):
    """A priority-0 backend: served only when named."""

    NAME = "test_explicit_only"
    CAPS = Capabilities(
        methods=frozenset({"gptq"}), formats=None, bits=frozenset({4}), group_sizes=None,
        sym=frozenset({True, False}), act_order=True, devices=frozenset({"cpu"}),
        dtypes=frozenset({torch.float32}), pack_dtypes=None, priority=0,
    )  # fmt: skip

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.dequantized_weight().T


def test_priority_zero_backends_serve_only_when_named() -> None:
    if "test_explicit_only" not in qkernels.registered_backends():
        register_backend(ExplicitOnly)
    c = qkernels.KernelContract("gptq", "gptq_v2", 4, 32, False, 128, 32)
    chosen = select(c, "cpu", torch.float32)
    assert chosen.backend != "test_explicit_only"
    assert select(c, "cpu", torch.float32, backend="test_explicit_only").backend == "test_explicit_only"
    m = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", backend="test_explicit_only")
    x = make_activations(ASYM, 2, torch.float32)
    assert torch.allclose(m(x), float_reference(x, make_weight(ASYM), None).float(), atol=1e-4)


def test_every_error_has_one_root_and_a_builtin() -> None:
    leaves = [
        qkernels.BackendRefusedError,
        qkernels.UnsupportedContractError,
        qkernels.KernelInputError,
        qkernels.UnknownBackendError,
        qkernels.DuplicateBackendError,
        qkernels.ExtensionBuildError,
    ]
    for leaf in leaves:
        assert issubclass(leaf, qkernels.QKernelsError)
        assert issubclass(leaf, (ValueError, KeyError, RuntimeError))


def test_bad_bias_is_named() -> None:
    tensors, meta = pack_weight(make_weight(ASYM), "gptq_v2")
    tensors["bias"] = np.zeros(31, dtype=np.float16)
    with pytest.raises(qkernels.KernelInputError, match=r"'bias'.*\(32,\)"):
        quant_linear("gptq_v2", tensors, meta)


def test_a_failed_extension_build_is_logged_and_recorded_not_hidden(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from qkernels import cpu_extension
    from qkernels.backends import cpu_int4

    def broken() -> None:
        monkeypatch.setattr(cpu_extension, "_failure", "c++: simulated compiler crash")
        raise cpu_extension.ExtensionBuildError("simulated compiler crash")

    def reasons() -> list[str]:  # this host's toolchain does not matter: only the recorded failure does
        failure = cpu_extension._failure
        return [] if failure is None else [f"the C++ extension failed to build in this process: {failure}"]

    monkeypatch.setattr(cpu_extension, "_loaded", None)
    monkeypatch.setattr(cpu_int4, "load_extension", broken)
    monkeypatch.setattr(cpu_int4, "extension_reasons", reasons)
    with pytest.raises(cpu_extension.ExtensionBuildError):
        quant_linear_from_weight(make_weight(ASYM), "gptq_v2", backend="cpu_int4")  # explicit: raised
    monkeypatch.setattr(cpu_extension, "_failure", None)  # forget it: AUTO now hits the failure itself
    with caplog.at_level("WARNING", logger="qkernels.build"):
        m = quant_linear_from_weight(make_weight(ASYM), "gptq_v2", dtype=torch.bfloat16)
    assert m.NAME == "aten_int4"
    assert "could not be built" in caplog.text
    rejected = {c.name: c.reasons for c in m.selection.rejected}
    assert "simulated compiler crash" in rejected["cpu_int4"][0]


@pytest.mark.parametrize("backend", ["torch", "aten_int4", pytest.param("cpu_int4", marks=needs_cpu_extension)])
def test_dtype_conversions_leave_stored_tensors_alone(backend: str) -> None:
    case = LayerCase("gptq_v2", 4, 32, False, 32, 128, bias=True)
    bias = np.linspace(-1, 1, 32).astype(np.float16)
    m = quant_linear_from_weight(make_weight(case), "gptq_v2", bias=bias, backend=backend)
    before = m.checkpoint_tensors()
    x = make_activations(case, 2, torch.float32)
    y = m(x)
    for convert in (lambda mod: mod.to(torch.bfloat16), lambda mod: mod.half(), lambda mod: mod.double()):
        convert(m)
        after = m.checkpoint_tensors()
        assert all(after[k].dtype == v.dtype and np.array_equal(after[k], v) for k, v in before.items())
        assert torch.equal(m(x), y)
