"""Output safety and failure reporting of the CLI: every case fails in one line, exit 2, no traceback."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

import pytest
from conftest import one_line_failure, run_lowbit


@pytest.mark.parametrize("where", ["same", "inside", "contains"])
def test_checkpoint_dir_overlapping_out_is_refused_before_any_work(tiny_llama: Path, tmp_path: Path, where) -> None:
    out = tmp_path / "out"
    ckpt = {"same": out, "inside": out / "ckpt", "contains": tmp_path}[where]
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(out), "--checkpoint-dir", str(ckpt))
    relation = {"same": "is", "inside": "is inside", "contains": "contains"}[where]
    one_line_failure(result, f"--checkpoint-dir {ckpt} {relation} --out {out}", "expected two separate directories")
    assert not out.exists()


def test_an_unwritable_out_location_is_refused_before_loading(tiny_llama: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(blocker / "out"))
    one_line_failure(result, f"--out {blocker / 'out'}", "is not a directory")
    read_only = Path("/sys/lowbit-out")  # sysfs: creating a file there fails even for root
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(read_only))
    one_line_failure(result, "--out /sys/lowbit-out: cannot write in /sys", "expected a writable location")


def test_too_little_free_space_is_refused_before_loading(tiny_llama: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 1000, 1000))
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "out"), "--bits", "4")
    one_line_failure(result, "free on", "the result needs about", "x 4/16")
    assert not (tmp_path / "out").exists()


def test_a_second_run_on_a_locked_out_fails_at_once(tiny_llama: Path, tmp_path: Path) -> None:
    from qformats.checkpoint.directory_lock import lock_path

    out = tmp_path / "out"
    fd = os.open(lock_path(out), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242")
        result = run_lowbit("quantize", str(tiny_llama), "--out", str(out), "--method", "rtn")
    finally:
        os.close(fd)
    one_line_failure(result, f"{out}: another run (pid 4242) is writing this directory")
    assert not out.exists()


def test_a_full_disk_during_the_save_is_one_line_and_publishes_nothing(
    tiny_llama: Path, tmp_path: Path, monkeypatch
) -> None:
    import qformats.checkpoint.safetensors_io as io
    import qformats.checkpoint.streamed_shard as streamed_shard

    def full(path: Path) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(io, "open_new", full)
    monkeypatch.setattr(streamed_shard, "open_body", full)  # the checkpoint writer's shards start with a body file
    out = tmp_path / "out"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--out", str(out), "--method", "rtn", "--group-size", "32", "--quiet"
    )
    one_line_failure(result, "No space left on device", "expected a writable location with enough free space")
    assert ".lowbit-stage-" in result.stderr  # names the file being written
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock"]  # no output, no staging left


def _broken_norm(tiny_llama: Path, tmp_path: Path, value: float) -> Path:
    from safetensors.numpy import load_file, save_file

    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_llama, broken)
    tensors = load_file(broken / "model.safetensors")
    tensors["model.norm.weight"][:] = value
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    return broken


def test_eval_with_a_nan_perplexity_fails_by_name(tiny_llama: Path, tmp_path: Path) -> None:
    broken = _broken_norm(tiny_llama, tmp_path, -3.0e38)  # finite weights whose logits overflow
    result = run_lowbit("eval", str(broken), "--max-windows", "1", "--max-new-tokens", "0")
    one_line_failure(result, f"{broken}: perplexity is nan", "expected a finite value")


def test_eval_refuses_a_nan_weight_by_name(tiny_llama: Path, tmp_path: Path) -> None:
    broken = _broken_norm(tiny_llama, tmp_path, float("nan"))
    result = run_lowbit("eval", str(broken), "--max-windows", "1", "--max-new-tokens", "0")
    one_line_failure(result, "model.norm.weight", "[VALUE-DENSE] expected finite values")
