"""``lowbit convert`` publishes the tokenizer and generation config with the weights (issue 36, item 8).

A convert killed (SIGKILL, qformats' ``fault_points``) right after its output directory was renamed into
place must leave an output that already holds the tokenizer: the side files are written into the staging
directory before the swap, never copied into the published directory afterwards.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from conftest import run_lowbit
from qformats.checkpoint import fault_points

SIDE = ("tokenizer.json", "tokenizer_config.json")


def _killed_convert(source: Path, out: Path, point: str) -> None:
    pid = os.fork()
    if pid == 0:  # the child converts and dies at the fault point
        code = 3
        try:
            os.environ[fault_points.ENV_VAR] = point
            run_lowbit("convert", str(source), "--to", "gptq_v2", "--out", str(out))
        except BaseException:  # the child must never return into pytest
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"{point}: not killed ({status})"


def test_a_convert_killed_after_the_rename_has_its_tokenizer(quantized: Path, tmp_path: Path) -> None:
    out = tmp_path / "v2"
    _killed_convert(quantized, out, "publish.renamed")
    assert out.is_dir()
    for name in SIDE:
        assert (out / name).read_bytes() == (quantized / name).read_bytes(), name
    inspected = run_lowbit("inspect", str(out))
    assert inspected.returncode == 0, inspected.stderr


def test_a_side_file_symlinked_out_of_the_source_is_refused_and_nothing_published(
    quantized: Path, tmp_path: Path
) -> None:
    import shutil

    source = tmp_path / "src"
    shutil.copytree(quantized, source)
    (source / "generation_config.json").unlink(missing_ok=True)
    (source / "generation_config.json").symlink_to("/etc/hostname")
    result = run_lowbit("convert", str(source), "--to", "gptq_v2", "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and "generation_config.json: a symlink to /etc/hostname" in result.stderr
    assert not (tmp_path / "out").exists()
