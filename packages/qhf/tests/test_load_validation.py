"""Every loader goes through qformats' one validation path (issue 36): ``qhf.load_quantized`` and
``export_dense`` refuse by rule what ``inspect`` reports, and the tensor reader verifies crc32 and finiteness."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import qhf
from qhf.errors import SourceFormatError
from qhf.source.tensor_reader import TensorReader
from sym_checkpoint import EMBED
from sym_checkpoint import sym_tensors as _tensors
from sym_checkpoint import write_sym as _write


def _first(tensors: dict[str, np.ndarray], suffix: str) -> str:
    return next(n for n in sorted(tensors) if n.endswith(suffix))


def _mutations(tensors: dict[str, np.ndarray]) -> dict[str, tuple[dict[str, np.ndarray], str]]:
    """name -> (mutated tensors, the rule the refusal must name)."""
    scales, qzeros = _first(tensors, ".scales"), _first(tensors, ".qzeros")
    out: dict[str, tuple[dict[str, np.ndarray], str]] = {}
    dropped = {n: v for n, v in tensors.items() if ".layers.1." not in n}
    out["dropped_layer"] = (dropped, "CONFIG-LAYERS")
    extra = dict(tensors)
    extra.update({n.replace(".layers.1.", ".layers.2."): v for n, v in tensors.items() if ".layers.1." in n})
    out["extra_layer"] = (extra, "CONFIG-LAYERS")
    for label, value in (("zero", 0.0), ("nan", np.nan), ("inf", np.inf)):
        bad = dict(tensors)
        bad[scales] = tensors[scales].copy()
        bad[scales][0, 1] = value
        out[f"{label}_scales"] = (bad, "VALUE-SCALES")
    asym = dict(tensors)
    asym[qzeros] = np.zeros_like(tensors[qzeros]) + np.int32(0x33333333)  # true zeros of 4 under sym
    out["sym_zeros"] = (asym, "VALUE-SYM-ZEROS")
    out["all_zero"] = ({n: np.zeros_like(v) for n, v in tensors.items()}, "VALUE-")
    nan_embed = dict(tensors)
    nan_embed[EMBED] = tensors[EMBED].copy()
    nan_embed[EMBED][2, 2] = np.nan
    out["nan_embed"] = (nan_embed, "VALUE-DENSE")
    return out


def test_a_clean_checkpoint_loads(tmp_path: Path, tiny_dirs) -> None:
    src = tiny_dirs("llama")
    lm = qhf.load_quantized(_write(src, tmp_path / "c", _tensors(src)))
    assert len(lm.backends) == 14


@pytest.mark.parametrize(
    "case",
    ["dropped_layer", "extra_layer", "zero_scales", "nan_scales", "inf_scales", "sym_zeros", "all_zero", "nan_embed"],
)
def test_load_quantized_and_export_dense_refuse_what_inspect_reports(tmp_path: Path, tiny_dirs, case: str) -> None:
    src = tiny_dirs("llama")
    tensors, rule = _mutations(_tensors(src))[case]
    path = _write(src, tmp_path / "c", tensors)
    with pytest.raises(SourceFormatError, match=rf"violation\(s\), refused: .*\[{rule}"):
        qhf.load_quantized(path)
    with pytest.raises(SourceFormatError, match=rf"\[{rule}"):
        qhf.export_dense(path, tmp_path / "dense")
    assert not (tmp_path / "dense").exists()


def test_the_tensor_reader_verifies_crc32_and_refuses_nan(tmp_path: Path, tiny_dirs) -> None:
    src = tiny_dirs("llama")
    tensors = _tensors(src)
    path = _write(src, tmp_path / "c", tensors)
    shard = path / "model.safetensors"
    reader = TensorReader({EMBED: shard})
    assert np.array_equal(reader.get(EMBED).numpy(), tensors[EMBED])
    from qformats.checkpoint.safetensors_io import SafetensorsFile

    start = SafetensorsFile(shard).tensors[EMBED].start
    data = bytearray(shard.read_bytes())
    data[start + 9] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(SourceFormatError, match=rf"tensor '{EMBED}': dtype, shape or bytes do not match the crc32"):
        TensorReader({EMBED: shard}).get(EMBED)
    nan = dict(tensors)
    nan[EMBED] = tensors[EMBED].copy()
    nan[EMBED][0, 0] = np.nan
    path = _write(src, tmp_path / "n", nan)
    with pytest.raises(SourceFormatError, match=rf"tensor '{EMBED}': \[VALUE-DENSE\] expected finite values"):
        TensorReader({EMBED: path / "model.safetensors"}).get(EMBED)
