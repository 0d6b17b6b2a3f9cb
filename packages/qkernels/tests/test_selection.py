"""Selection: AUTO order, explanations, refusals of explicit backends, errors listing every reason."""

import os
import sys

import pytest
import torch
from qkernels import (
    BackendRefusedError,
    KernelContract,
    KernelInputError,
    QKernelsError,
    UnsupportedContractError,
    get_backend,
    probe,
    quant_linear_from_weight,
    registered_backends,
    select,
)
from qkernels.checkpoint import load_checkpoint, pack_weight
from qkernels.cpu_extension import extension_reasons
from qkernels.testing.cases import LayerCase, make_weight


def contract(bits: int = 4, group_size: int = 128, fmt: str = "gptq_v2", **kw: object) -> KernelContract:
    base = dict(method="gptq", format=fmt, bits=bits, group_size=group_size, sym=True, in_features=256,
                out_features=64)  # fmt: skip
    base.update(kw)
    return KernelContract(**base)  # type: ignore[arg-type]


# The AVX2 kernel needs AVX2 and a C++ toolchain; where the host lacks them, AUTO must say so and use ATen.
CPU_EXTENSION_REASONS = tuple(extension_reasons())
FAST_CPU = "aten_int4" if CPU_EXTENSION_REASONS else "cpu_int4"


def test_auto_prefers_the_fast_cpu_path_for_4bit() -> None:
    chosen = select(contract(), "cpu", torch.bfloat16)
    assert chosen.backend == FAST_CPU
    if CPU_EXTENSION_REASONS:
        assert chosen.rejected[0].name == "cpu_int4" and chosen.rejected[0].reasons == CPU_EXTENSION_REASONS
    else:
        assert chosen.rejected == ()  # the first candidate in priority order won


def test_disabled_extension_moves_auto_to_aten_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QKERNELS_DISABLE_CPU_EXTENSION", "1")
    chosen = select(contract(), "cpu", torch.bfloat16)
    assert chosen.backend == "aten_int4"
    assert chosen.rejected[0].name == "cpu_int4"
    assert "disabled by QKERNELS_DISABLE_CPU_EXTENSION" in chosen.rejected[0].reasons[0]


def test_auto_explains_every_rejected_candidate() -> None:
    chosen = select(contract(bits=3, group_size=32), "cpu", torch.float32)
    assert chosen.backend == "torch"
    rejected = {c.name: c.reasons for c in chosen.rejected}
    assert "bits 3 not in {4}" in rejected["aten_int4"] and "bits 3 not in {4}" in rejected["cpu_int4"]
    assert any("device 'cpu' not in {cuda}" in r for r in rejected["triton_gptq"])
    assert any("method 'gptq' not in {awq}" in r for r in rejected["triton_awq"])
    text = chosen.explain()
    assert "selected 'torch'" in text and all(name in text for name in rejected)


def test_explain_false_skips_the_rejections() -> None:
    assert select(contract(bits=3, group_size=32), "cpu", torch.float32, explain=False).rejected == ()


def test_all_mismatches_are_reported_at_once() -> None:
    c = contract(bits=3, group_size=-1, in_features=255, out_features=33)
    reasons = probe(c, "cpu", torch.bfloat16, backend="aten_int4")["aten_int4"]
    assert len(reasons) >= 4  # bits, group size, in multiple, out multiple


def test_explicit_backend_that_cannot_serve_is_refused_not_replaced() -> None:
    with pytest.raises(BackendRefusedError) as info:
        select(contract(bits=8), "cpu", torch.bfloat16, backend="aten_int4")
    assert info.value.backend == "aten_int4"
    assert "bits 8 not in {4}" in info.value.reasons
    assert isinstance(info.value, QKernelsError) and isinstance(info.value, ValueError)


def test_no_feasible_backend_lists_every_backend_reason() -> None:
    c = contract(fmt="no_such_layout")
    with pytest.raises(UnsupportedContractError) as info:
        select(c, "cpu", torch.float32)
    assert set(info.value.reasons) == set(registered_backends())
    assert "no layout registered" in " ".join(info.value.reasons["torch"])
    assert all(info.value.reasons.values())


def test_unavailable_gpu_is_a_reason_not_a_crash() -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU; the no-GPU reason cannot appear")
    with pytest.raises(UnsupportedContractError) as info:
        select(contract(), "cuda", torch.float16)
    assert all("no CUDA device" in " ".join(r) or "device 'cuda'" in " ".join(r) for r in info.value.reasons.values())


def test_emulated_gpu_selects_the_triton_backend() -> None:
    chosen = select(contract(), "cuda", torch.float16, emulate=True)
    assert chosen.backend == "triton_gptq" and chosen.target.emulated
    assert chosen.target.torch_device == torch.device("cpu")
    awq = select(contract(method="awq", fmt="gemm"), "cuda", torch.float16, emulate=True)
    assert awq.backend == "triton_awq"


def test_emulation_without_the_interpreter_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in a fresh process: the kernels not imported yet and TRITON_INTERPRET unset (Triton reads it per access).
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delitem(sys.modules, "qkernels.triton_kernels.int4_matmul", raising=False)
    c = KernelContract("gptq", "gptq_v2", 4, 128, True, 256, 64)
    with pytest.raises(BackendRefusedError, match="TRITON_INTERPRET=1"):
        select(c, "cuda", torch.float16, backend="triton_gptq", emulate=True)


def test_activation_shape_is_checked() -> None:
    with pytest.raises(KernelInputError, match=r"\[\.\.\., 256\]"):
        select(contract(), "cpu", torch.float32, shape=(4, 255))
    assert select(contract(), "cpu", torch.bfloat16, shape=(4, 256)).backend == FAST_CPU


def test_probe_answers_every_backend_without_building() -> None:
    answer = probe(contract(), "cpu", torch.bfloat16)
    assert set(answer) == set(registered_backends())
    assert answer["cpu_int4"] == CPU_EXTENSION_REASONS and answer["aten_int4"] == () and answer["torch"] == ()
    assert answer["triton_gptq"]


def test_weight_structure_moves_auto_to_the_next_backend() -> None:
    # act-order whose groups are not all group_size wide: the ATen path cannot make them contiguous.
    case = LayerCase("gptq_v2", 4, 32, False, 32, 128)
    w = make_weight(case)
    g_idx = w.g_idx.copy()
    g_idx[0] = 1  # group 0 now holds 31 columns and group 1 holds 33
    odd = type(w)(w.codes, w.scales, w.zeros, g_idx, 4, 32, False)
    tensors, meta = pack_weight(odd, "gptq_v2")
    loaded = load_checkpoint("gptq_v2", tensors, meta)
    chosen = select(loaded.contract, "cpu", torch.bfloat16, logical=loaded.logical)
    assert chosen.backend == "torch"
    for name in ("aten_int4",) if CPU_EXTENSION_REASONS else ("cpu_int4", "aten_int4"):
        rejected = next(c for c in chosen.rejected if c.name == name)
        assert "not all of size 32" in rejected.reasons[0]
    with pytest.raises(BackendRefusedError):
        quant_linear_from_weight(odd, "gptq_v2", backend="aten_int4", dtype=torch.bfloat16)


# "cpu" always; "cuda" only in the gpu nox session (LOWBIT_REQUIRE_CUDA=1), where a host without CUDA fails.
DEVICES = ["cpu", *(["cuda"] if os.environ.get("LOWBIT_REQUIRE_CUDA") == "1" else [])]


@pytest.mark.parametrize("device", DEVICES)
def test_auto_picks_a_backend_of_the_device_it_is_given(device: str) -> None:
    for fmt, method in (("gptq_v2", "gptq"), ("gemm", "awq")):
        chosen = select(contract(method=method, fmt=fmt), device, torch.float16, explain=True)
        assert chosen.target.kind == device and not chosen.target.emulated
        assert device in get_backend(chosen.backend).CAPS.devices, chosen.explain()
        if device == "cuda":  # a compiled Triton kernel, not the torch reference
            assert chosen.backend.startswith("triton"), chosen.explain()
