"""Checkpoint directories: file modes from the umask, the output lock, escaping symlinks, bad config JSON."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import build
from qformats.checkpoint import Checkpoint, write_checkpoint
from qformats.checkpoint.directory_lock import DirectoryLockedError, directory_lock
from qformats.errors import CheckpointFormatError


def test_files_and_directory_get_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        build(tmp_path / "c", "gptq", sym=True, layers=2, max_shard_size="10KB")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o755
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "c").iterdir()}
    assert len(modes) >= 4 and set(modes.values()) == {0o644}, modes


def test_a_second_writer_on_a_locked_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "out"
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds the lock until the parent has tried
        code = 0
        try:
            with directory_lock(target):
                os.write(ready_w, b"1")
                os.read(done_r, 1)
        except BaseException:
            code = 1
        os._exit(code)
    try:
        assert os.read(ready_r, 1) == b"1"
        with pytest.raises(DirectoryLockedError, match=rf"{target}: another run \(pid {pid}\)"):
            write_checkpoint(target, {"w": np.ones(4, np.float32)}, quantize_config=None)
        assert not target.exists()
    finally:
        os.write(done_w, b"1")
        os.waitpid(pid, 0)
    write_checkpoint(target, {"w": np.ones(4, np.float32)}, quantize_config=None)  # released when the child ended
    assert (target / "model.safetensors").is_file()


def test_the_lock_is_reentrant_within_one_process(tmp_path: Path) -> None:
    with directory_lock(tmp_path / "out"):
        write_checkpoint(tmp_path / "out", {"w": np.ones(4, np.float32)}, quantize_config=None)
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_shard_symlinked_outside_the_directory_is_refused_by_name(tmp_path: Path) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    build(tmp_path / "elsewhere", "gptq", sym=True, layers=1, seed=5)
    (tmp_path / "c" / "model.safetensors").unlink()
    (tmp_path / "c" / "model.safetensors").symlink_to(tmp_path / "elsewhere" / "model.safetensors")
    with pytest.raises(CheckpointFormatError, match=r"model\.safetensors: a symlink to .* outside the checkpoint"):
        Checkpoint(tmp_path / "c")


def test_a_symlink_inside_the_directory_is_allowed(tmp_path: Path) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    (tmp_path / "c" / "configs").mkdir()
    (tmp_path / "c" / "quantize_config.json").rename(tmp_path / "c" / "configs" / "q.json")
    (tmp_path / "c" / "quantize_config.json").symlink_to(Path("configs") / "q.json")
    assert Checkpoint(tmp_path / "c").fields.bits == 4


def test_a_config_symlinked_outside_the_directory_is_refused(tmp_path: Path) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    outside = tmp_path / "q.json"
    outside.write_text((tmp_path / "c" / "quantize_config.json").read_text())
    (tmp_path / "c" / "quantize_config.json").unlink()
    (tmp_path / "c" / "quantize_config.json").symlink_to(outside)
    with pytest.raises(CheckpointFormatError, match=r"quantize_config\.json: a symlink to"):
        Checkpoint(tmp_path / "c")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"bits": 4, "group_size": 32, "note": "\xff\xfe"}', r"quantize_config\.json: not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, r"quantize_config\.json: JSON nested too deeply"),
    ],
)
def test_bad_config_json_is_a_named_error(tmp_path: Path, content: bytes, message: str) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    (tmp_path / "c" / "quantize_config.json").write_bytes(content)
    with pytest.raises(CheckpointFormatError, match=message):
        Checkpoint(tmp_path / "c")


def test_a_deeply_nested_index_is_a_named_error(tmp_path: Path) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=2, max_shard_size="10KB")
    (tmp_path / "c" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}})[:-1] + "[" * 100_000)
    with pytest.raises(CheckpointFormatError, match=r"index\.json: "):
        Checkpoint(tmp_path / "c")


def test_saving_through_a_symlinked_target_replaces_the_linked_directory(tmp_path: Path) -> None:
    build(tmp_path / "real", "gptq", sym=True, layers=1)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    weights = build(tmp_path / "link", "gptq", sym=True, layers=2, seed=3)
    assert (tmp_path / "link").is_symlink()
    ck = Checkpoint(tmp_path / "real")
    assert [e.prefix for e in ck.modules()] == sorted(weights)
    assert all(ck.unpack(e).equals(weights[e.prefix]) for e in ck.modules())


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "quantize_config.json"])
def test_a_fifo_is_refused_without_being_opened(tmp_path: Path, name: str) -> None:
    """Opening a FIFO blocks until a writer comes: the regular-file check runs first (an alarm guards the hang)."""
    import signal

    from qformats.inspect import inspect

    build(tmp_path / "c", "gptq", sym=True, layers=1)
    (tmp_path / "c" / name).unlink()
    os.mkfifo(tmp_path / "c" / name)
    signal.alarm(240)  # a hang guard of minutes: SIGALRM's default action ends the run rather than hang it
    try:
        with pytest.raises(CheckpointFormatError, match=rf"{name.replace('.', '[.]')}: a FIFO, not a regular file"):
            inspect(tmp_path / "c")
    finally:
        signal.alarm(0)


def test_a_dense_config_read_follows_no_symlink_out_of_the_directory(tmp_path: Path) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    (tmp_path / "c" / "config.json").unlink()
    (tmp_path / "c" / "config.json").symlink_to("/etc/hostname")
    with pytest.raises(CheckpointFormatError, match=r"config\.json: a symlink to /etc/hostname, outside"):
        Checkpoint(tmp_path / "c").validate()
