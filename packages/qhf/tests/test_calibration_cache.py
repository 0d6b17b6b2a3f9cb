"""The calibration cache: keyed per model, tokenizer and settings; hits reuse rows; bad entries are regenerated."""

from __future__ import annotations

import json

import pytest
from qhf.calibration import DefaultCalibration, default_calibration
from qhf.calibration.sample_cache import CHUNK, SAMPLES, cache_root, file_fingerprint
from qhf.calibration.source_default import sample_cache

MIX = DefaultCalibration(documentation_rows=1, self_generated_rows=3, length=16, batch_size=2, prompts=("", "The"))


def _open(tiny_dirs):
    import qhf

    return qhf.load(tiny_dirs("llama"), {"method": "gptq"})


def test_cache_root_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path / "calibration"
    monkeypatch.delenv("LOWBIT_CACHE_DIR")
    assert cache_root().parts[-3:] == (".cache", "lowbit", "calibration")


def test_second_run_reads_the_rows_and_loads_no_weights(tiny_dirs, calibration_cache, monkeypatch) -> None:
    first_model = _open(tiny_dirs)
    first = default_calibration(first_model.source, first_model.tokenizer, MIX)
    assert first.cache == "miss" and len(list(calibration_cache.glob("*.json"))) == 1
    assert not list(calibration_cache.glob("*.tmp"))  # written atomically: no temporary left behind
    qm = _open(tiny_dirs)

    def refuse() -> None:
        raise AssertionError("a cache hit must not load the decoder layers")

    monkeypatch.setattr(qm.source, "materialize_all", refuse)
    second = default_calibration(qm.source, qm.tokenizer, MIX)
    assert second.cache == "hit" and second.rows == first.rows and second.meta == first.meta
    assert second.generation_seconds == 0.0


def test_the_key_follows_settings_and_tokenizer(tiny_dirs) -> None:
    from dataclasses import replace

    qm = _open(tiny_dirs)
    base = sample_cache(qm.source, qm.tokenizer, MIX.generation())
    other_seed = sample_cache(qm.source, qm.tokenizer, replace(MIX, seed=1).generation())
    other_prompts = sample_cache(qm.source, qm.tokenizer, replace(MIX, prompts=("", "A")).generation())
    assert len({base.key, other_seed.key, other_prompts.key}) == 3
    qm.tokenizer.add_tokens(["<extra-token>"])
    assert sample_cache(qm.source, qm.tokenizer, MIX.generation()).key != base.key


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated: not JSON
        lambda text: text.replace('"rows":[[', '"rows":[[7,', 1),  # a row one token longer
        lambda text: json.dumps({**json.loads(text), "rows_sha256": "0" * 64}),  # rows not matching their hash
        lambda text: json.dumps({**json.loads(text), "key": "another"}),
    ],
)
def test_a_damaged_entry_is_ignored_with_a_warning_and_regenerated(tiny_dirs, calibration_cache, caplog, damage):
    qm = _open(tiny_dirs)
    first = default_calibration(qm.source, qm.tokenizer, MIX)
    (entry,) = calibration_cache.glob("*.json")
    entry.write_text(damage(entry.read_text()))
    with caplog.at_level("WARNING"):
        again = default_calibration(qm.source, qm.tokenizer, MIX)
    assert "calibration cache: ignoring" in caplog.text
    assert again.cache == "miss" and again.rows == first.rows  # regenerated, the same rows
    assert default_calibration(qm.source, qm.tokenizer, MIX).cache == "hit"  # and written back whole


def test_a_tampered_token_is_caught_by_the_rows_hash(tiny_dirs, calibration_cache, caplog) -> None:
    qm = _open(tiny_dirs)
    first = default_calibration(qm.source, qm.tokenizer, MIX)
    (entry,) = calibration_cache.glob("*.json")
    data = json.loads(entry.read_text())
    data["rows"][0][-1] = (data["rows"][0][-1] + 1) % 300
    entry.write_text(json.dumps(data))
    with caplog.at_level("WARNING"):
        again = default_calibration(qm.source, qm.tokenizer, MIX)
    assert "do not match their recorded SHA-256" in caplog.text and again.rows == first.rows


def test_cache_off_neither_reads_nor_writes(tiny_dirs, calibration_cache) -> None:
    from dataclasses import replace

    qm = _open(tiny_dirs)
    mixed = default_calibration(qm.source, qm.tokenizer, replace(MIX, cache=False))
    assert mixed.cache == "off" and not calibration_cache.exists()


def test_file_fingerprint_samples_large_files(tmp_path) -> None:
    big = tmp_path / "model.safetensors"
    data = bytearray(range(256)) * (SAMPLES * CHUNK // 64)  # 4x the sampled bytes
    big.write_bytes(bytes(data))
    base = file_fingerprint(big)
    data[0] ^= 1  # the header chunk is sampled
    big.write_bytes(bytes(data))
    assert file_fingerprint(big)["sha256"] != base["sha256"]
    data[0] ^= 1
    data[CHUNK + 5] ^= 1  # between two sampled chunks: not read (a bounded read, by design)
    big.write_bytes(bytes(data))
    assert file_fingerprint(big) == base
    big.write_bytes(bytes(data) + b"x")
    assert file_fingerprint(big)["size"] != base["size"]
