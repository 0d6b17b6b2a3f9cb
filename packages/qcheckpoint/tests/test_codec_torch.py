"""Continuation codec with torch: every supported dtype, devices, Parameters, aliasing and rejections."""

from __future__ import annotations

import json
import struct

import pytest

torch = pytest.importorskip("torch")  # torch is in the test extra; a torch-free install still runs the rest

from qcheckpoint import ContinuationError, decode_continuation, encode_continuation  # noqa: E402

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def bytes_of(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3, 5), (2, 0, 4)])
def test_torch_dtypes_roundtrip_bit_exact(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    raw = torch.randint(0, 256, (max(1, torch.Size(shape).numel()) * dtype.itemsize,), dtype=torch.uint8)
    tensor = raw[: torch.Size(shape).numel() * dtype.itemsize].view(dtype).reshape(shape)
    decoded = decode_continuation(encode_continuation({"t": tensor}))["t"]
    assert type(decoded) is torch.Tensor
    assert decoded.dtype == dtype and decoded.shape == tensor.shape and decoded.device.type == "cpu"
    assert bytes_of(decoded) == bytes_of(tensor)  # NaN payloads and -0.0 included


def test_views_parameters_grad_flags_aliases_and_devices() -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    param = torch.nn.Parameter(torch.randn(2, 2))
    frozen = torch.nn.Parameter(torch.ones(1), requires_grad=False)
    grad = torch.zeros(3, requires_grad=True)
    tree = {
        "t": base.t(),  # non-contiguous
        "alias": [param, param],
        "frozen": frozen,
        "grad": grad,
        "devs": (torch.device("cpu"), torch.device("cuda", 1), torch.device("cuda")),
        "np_and_torch": [base.numpy(), base],
    }
    decoded = decode_continuation(encode_continuation(tree))
    assert torch.equal(decoded["t"], base.t())
    assert decoded["alias"][0] is decoded["alias"][1] and isinstance(decoded["alias"][0], torch.nn.Parameter)
    assert decoded["alias"][0].requires_grad and torch.equal(decoded["alias"][0], param)
    assert isinstance(decoded["frozen"], torch.nn.Parameter) and not decoded["frozen"].requires_grad
    assert decoded["grad"].requires_grad and type(decoded["grad"]) is torch.Tensor
    assert decoded["devs"] == (torch.device("cpu"), torch.device("cuda", 1), torch.device("cuda"))
    assert decoded["np_and_torch"][0].dtype.name == "float32" and torch.equal(decoded["np_and_torch"][1], base)


def test_blob_reads_with_safetensors_torch() -> None:
    from safetensors.torch import load

    tensor = torch.randn(4, 3, dtype=torch.bfloat16)
    loaded = load(encode_continuation([tensor]))
    assert torch.equal(loaded["0"], tensor)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.zeros(2, dtype=torch.complex64), "complex64"),
        (torch.zeros(2, 2).to_sparse(), "strided"),
        (torch.empty(2, device="meta"), "meta"),
        (torch.device("meta"), "meta"),
    ],
)
def test_unsupported_torch_values(value: object, message: str) -> None:
    with pytest.raises(ContinuationError, match=message):
        encode_continuation({"v": value})


def test_tensor_subclass_is_rejected() -> None:
    class Sub(torch.Tensor):
        pass

    with pytest.raises(ContinuationError, match="subclass"):
        encode_continuation([torch.zeros(2).as_subclass(Sub)])


def rewrite_tree(blob: bytes, edit: object) -> bytes:
    """Re-emit ``blob`` with its continuation tree transformed by ``edit`` (tensor data unchanged)."""
    length = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + length])
    doc = json.loads(header["__metadata__"]["continuation"])
    doc["tree"] = edit(doc["tree"])  # type: ignore[operator]
    header["__metadata__"]["continuation"] = json.dumps(doc)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob[8 + length :]


def test_cuda_placement_is_restored_or_refused() -> None:
    blob = encode_continuation({"t": torch.arange(4, dtype=torch.int16)})

    def to_cuda(tree: list) -> list:  # type: ignore[type-arg]
        tree[1][0][1][1]["device"] = "cuda:0"
        return tree

    moved = rewrite_tree(blob, to_cuda)
    if torch.cuda.is_available():
        restored = decode_continuation(moved)["t"]
        assert restored.device == torch.device("cuda", 0) and torch.equal(restored.cpu(), torch.arange(4).short())
    else:
        with pytest.raises(ContinuationError, match=r"tree\['t'\]: recorded on cuda:0 but that CUDA device"):
            decode_continuation(moved)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_roundtrip_on_their_device() -> None:
    tensor = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    decoded = decode_continuation(encode_continuation({"t": tensor, "d": tensor.device}))
    assert decoded["t"].device == tensor.device and torch.equal(decoded["t"], tensor)
    assert decoded["d"] == tensor.device
