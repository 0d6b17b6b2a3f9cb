"""Fuzz: seeded mutations of a saved checkpoint; every load equals the original or raises a named error.

A 3-module GPTQ checkpoint in several shards (with index) is saved once. Each case copies it, applies one
mutation -- a header byte, the header length, a header entry's dtype/shape/offsets/name, the checksum
metadata, a data byte, truncation or trailing bytes, a quantization config field, the index -- and loads
it: every module unpacked and dequantized, every dense tensor read. The result must equal the original
bit for bit, or the load must raise a :class:`QFormatsError` with a one-line message; any other
exception (``KeyError``, ``IndexError``, a numpy error ...) fails the test.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import GPTQ_CONFIG, module_tensors
from qformats.checkpoint import Checkpoint, write_checkpoint
from qformats.checkpoint.dtypes import SAFETENSORS_DTYPES
from qformats.errors import QFormatsError
from random_weights import random_weight

CASES = 400
SEED = 19


def _load(path: Path) -> dict[str, bytes]:
    ck = Checkpoint(path)
    out = {}
    for entry in ck.modules():
        out[entry.prefix] = ck.unpack(entry).dequantize(dtype=np.float32).tobytes()
    for name in ck.dense_names():
        arr = ck.load(name)
        out[name] = arr.tobytes() + str(arr.dtype).encode() + str(arr.shape).encode()
    return out


def _shards(path: Path) -> list[Path]:
    return sorted(path.glob("model*.safetensors"))


def _split(file: Path) -> tuple[dict[str, object], bytes]:
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _join(file: Path, header: dict[str, object], data: bytes) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    file.write_bytes(struct.pack("<Q", len(text)) + text + data)


def header_byte(rng: np.random.Generator, path: Path) -> None:
    file = _shards(path)[rng.integers(len(_shards(path)))]
    raw = bytearray(file.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    raw[8 + int(rng.integers(n))] ^= 1 << int(rng.integers(8))
    file.write_bytes(bytes(raw))


def header_length(rng: np.random.Generator, path: Path) -> None:
    file = _shards(path)[0]
    raw = bytearray(file.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    new = int(rng.choice([n - 8, n + 8, n - 1, n + 1, 0, 2**63, len(raw)]))
    raw[:8] = struct.pack("<Q", max(new, 0))
    file.write_bytes(bytes(raw))


def header_entry(rng: np.random.Generator, path: Path) -> None:
    file = _shards(path)[rng.integers(len(_shards(path)))]
    header, data = _split(file)
    name = str(rng.choice(sorted(k for k in header if k != "__metadata__")))
    entry = header[name]
    assert isinstance(entry, dict)
    kind = int(rng.integers(6))
    if kind == 0:
        entry["dtype"] = str(rng.choice(sorted(SAFETENSORS_DTYPES)))
    elif kind == 1:
        shape = list(entry["shape"]) or [1]
        shape[int(rng.integers(len(shape)))] += int(rng.choice([-1, 1, 2]))
        entry["shape"] = shape
    elif kind == 2:
        entry["shape"] = list(reversed(entry["shape"])) + ([1] if rng.random() < 0.5 else [])
    elif kind == 3:
        shift = int(rng.choice([-8, -2, 2, 8]))
        entry["data_offsets"] = [max(o + shift, 0) for o in entry["data_offsets"]]
    elif kind == 4:
        header[name + ".x" if rng.random() < 0.5 else name.replace("qweight", "qweigh")] = header.pop(name)
    else:
        del header[name]
    _join(file, header, data)


def checksum_metadata(rng: np.random.Generator, path: Path) -> None:
    file = _shards(path)[rng.integers(len(_shards(path)))]
    header, data = _split(file)
    meta = header["__metadata__"]
    assert isinstance(meta, dict)
    kind = int(rng.integers(3))
    if kind == 0:
        sums = json.loads(meta["qformats.crc32"])
        key = str(rng.choice(sorted(sums)))
        sums[key] = (sums[key] + 1) % 2**32
        meta["qformats.crc32"] = json.dumps(sums)
    elif kind == 1:
        meta["qformats.crc32"] = meta["qformats.crc32"][:-3]
    else:
        del meta["qformats.crc32"]  # no checksum: the unchanged bytes still load as the original
    _join(file, header, data)


def data_byte(rng: np.random.Generator, path: Path) -> None:
    file = _shards(path)[rng.integers(len(_shards(path)))]
    raw = bytearray(file.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    raw[8 + n + int(rng.integers(len(raw) - 8 - n))] ^= 1 << int(rng.integers(8))
    file.write_bytes(bytes(raw))


def truncate_or_extend(rng: np.random.Generator, path: Path) -> None:
    file = _shards(path)[rng.integers(len(_shards(path)))]
    raw = file.read_bytes()
    file.write_bytes(raw[: int(rng.integers(len(raw)))] if rng.random() < 0.7 else raw + b"\0" * 8)


CONFIG_VALUES: dict[str, list[object]] = {
    "bits": [2, 3, 8, "4", None, 4.0, True, 0, 99],
    "group_size": [64, 128, -1, 0, "x", None, 16],
    "sym": [False, "yes", None, 1],
    "format": ["gptq_v2", "marlin", "awq", "bogus", 3, "gemm"],
    "desc_act": [True, "no"],
    "quant_method": ["awq", "rtn", "fp8", "x", None],
    "dynamic": [{"-:.*": {}}, {r".*\.1\.": {"bits": 8}}, {"(": {}}, [], {".*": {"group_size": 64}}, {".*": 3}],
    "pack_dtype": ["int16", "int8", "float32", 5],
}


def quant_config(rng: np.random.Generator, path: Path) -> None:
    file = path / "quantize_config.json"
    kind = int(rng.integers(10))
    if kind == 0:
        file.write_bytes(file.read_bytes()[: int(rng.integers(1, 40))])
        return
    if kind == 1:
        file.write_bytes(b"\xff\xfe" + file.read_bytes())
        return
    data = json.loads(file.read_text())
    field = str(rng.choice(sorted(CONFIG_VALUES)))
    if kind == 2:
        data.pop(field, None)
    else:
        values = CONFIG_VALUES[field]
        data[field] = values[int(rng.integers(len(values)))]
    file.write_text(json.dumps(data))


def index(rng: np.random.Generator, path: Path) -> None:
    file = path / "model.safetensors.index.json"
    data = json.loads(file.read_text())
    weight_map = data["weight_map"]
    name = str(rng.choice(sorted(weight_map)))
    kind = int(rng.integers(5))
    if kind == 0:
        others = sorted(set(weight_map.values()) - {weight_map[name]})
        weight_map[name] = others[int(rng.integers(len(others)))]
    elif kind == 1:
        del weight_map[name]
    elif kind == 2:
        weight_map[name + ".extra"] = weight_map[name]
    elif kind == 3:
        weight_map[name] = str(rng.choice(["../model.safetensors", "missing.safetensors", "/etc/passwd"]))
    else:
        data = rng.choice(["[]", "{}", '{"weight_map": 3}'])
        file.write_text(str(data))
        return
    file.write_text(json.dumps(data))


MUTATIONS: tuple[Callable[[np.random.Generator, Path], None], ...] = (
    header_byte,
    header_length,
    header_entry,
    checksum_metadata,
    data_byte,
    truncate_or_extend,
    quant_config,
    index,
)


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    path = tmp_path_factory.mktemp("fuzz") / "original"
    rng = np.random.default_rng(0)
    weights = {f"model.layers.{i}.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True) for i in range(3)}
    write_checkpoint(
        path,
        module_tensors("gptq", weights),
        quantize_config=GPTQ_CONFIG,
        model_config={"model_type": "llama", "num_hidden_layers": 3},
        max_shard_size="6KB",
    )
    assert len(_shards(path)) >= 3
    return path, _load(path)


def test_every_mutated_load_equals_the_original_or_raises_a_named_error(
    original: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    source, expected = original
    rng = np.random.default_rng(SEED)
    outcomes: Counter[str] = Counter()
    for case in range(CASES):
        mutation = MUTATIONS[case % len(MUTATIONS)]
        work = tmp_path / f"case-{case}"
        shutil.copytree(source, work)
        mutation(rng, work)
        try:
            loaded = _load(work)
        except QFormatsError as exc:
            message = str(exc)
            assert message and "\n" not in message, f"case {case} ({mutation.__name__}): {message!r}"
            outcomes[f"{mutation.__name__}: refused"] += 1
        else:
            assert loaded == expected, f"case {case} ({mutation.__name__}): loaded different values silently"
            outcomes[f"{mutation.__name__}: equal"] += 1
        shutil.rmtree(work)
    print(f"{CASES} fuzz cases: {dict(sorted(outcomes.items()))}")
    assert sum(outcomes.values()) == CASES
    for mutation in MUTATIONS:  # every kind of mutation was refused at least once
        assert outcomes[f"{mutation.__name__}: refused"] > 0, mutation.__name__
