"""A third-party method through qhf and the CLI: the test package ``plugin_method/`` (``rtn_clip``: RTN with a
per-group clipped range search, its own qlooper processor, GPTQ's layout) is found by qhf's method registry through
a ``lowbit.methods`` entry point, without installing anything: its ``src/`` and a ``*.dist-info`` folder holding
the entry point (as ``pip install`` would write it) are put on ``sys.path`` (``PYTHONPATH`` for the CLI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SRC = ROOT / "tests-integration" / "plugin_method" / "src"
sys.path.insert(0, str(ROOT / "packages" / "qhf" / "tests"))


def write_dist_info(site: Path) -> Path:
    """A minimal installed-distribution record of the plugin in ``site``: METADATA and entry_points.txt."""
    info = site / "lowbit_rtn_clip-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lowbit-rtn-clip\nVersion: 0.1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[lowbit.methods]\nrtn_clip = lowbit_rtn_clip.method:RTNClipMethod\n", encoding="utf-8"
    )
    return site


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The plugin on ``sys.path`` and registered (entry points discovered again); removed after the module."""
    from qhf.methods import discover_methods, find_method, unregister_method
    from qlooper.processors.registry import unregister_processor

    site = write_dist_info(tmp_path_factory.mktemp("site"))
    sys.path[:0] = [str(site), str(PLUGIN_SRC)]
    try:
        assert "rtn_clip" in discover_methods()
        yield site
    finally:
        sys.path.remove(str(site))
        sys.path.remove(str(PLUGIN_SRC))
        if find_method("rtn_clip") is not None:
            unregister_method("rtn_clip")
            unregister_processor("rtn_clip")
        for name in [m for m in sys.modules if m == "lowbit_rtn_clip" or m.startswith("lowbit_rtn_clip.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama", "llama")


def test_the_registry_finds_the_entry_point(plugin_site: Path) -> None:
    from qhf.methods import cli_names, get_method, method_names
    from qlooper.processors.registry import registered_methods

    method = get_method("rtn_clip")
    assert not method.builtin and method.processor_name == "rtn_clip"
    assert method_names()[-1] == "rtn_clip" and "rtn_clip" in cli_names()
    assert "rtn_clip" in registered_methods()  # its own qlooper processor, registered by the plugin


def test_unknown_setting_is_refused_naming_it(plugin_site: Path) -> None:
    import qhf
    from qhf.quant_config import QuantConfigError, read_quantize_config

    with pytest.raises(
        QuantConfigError,
        match=r"clip_grd: not a setting of method 'rtn_clip' \(it accepts: clip_grid, clip_min_ratio\)",
    ):
        read_quantize_config({"method": "rtn_clip", "bits": 4, "clip_grd": 5})
    with pytest.raises(QuantConfigError, match=r"damp_percent: not a setting of method 'rtn_clip'"):
        read_quantize_config({"method": "rtn_clip", "bits": 4, "damp_percent": 0.1})
    with pytest.raises(QuantConfigError, match=r"clip_min_ratio: expected a number in \(0, 1\], found 1.5"):
        read_quantize_config({"method": "rtn_clip", "bits": 4, "clip_min_ratio": 1.5})
    with pytest.raises(
        QuantConfigError, match=r"format: method 'rtn_clip' writes one of gptq, gptq_v2, gptq_p, found 'gemm'"
    ):
        read_quantize_config({"method": "rtn_clip", "bits": 4, "format": "gemm"})
    assert qhf  # the package under test is importable with the plugin on the path


def test_its_config_reads_back_equal(plugin_site: Path) -> None:
    from qhf.quant_config import read_quantize_config

    first = read_quantize_config({"method": "rtn_clip", "bits": 3, "group_size": 64, "clip_grid": 7})
    assert (first.method.value, first.format, first.meta["algorithm"]) == ("gptq", "gptq", "rtn_clip")
    assert first.settings == {"clip_grid": 7, "clip_min_ratio": 0.5} and first.unknown == {}
    again = read_quantize_config(first)
    assert again == first and again.settings == first.settings


def test_clipped_search_beats_plain_rtn(plugin_site: Path) -> None:
    from lowbit_rtn_clip import ClipSpec, quantize_clipped
    from qalgos.rtn import quantize_rtn
    from qalgos.spec import QuantSpec

    torch.manual_seed(0)
    weight = torch.randn(32, 256) * torch.linspace(0.5, 2.0, 256)
    spec = QuantSpec(bits=3, group_size=64, sym=True, scale_dtype="float16")
    clipped = quantize_clipped(weight, ClipSpec(spec, grid=10, min_ratio=0.5))
    plain = quantize_rtn(weight, spec)
    assert clipped.loss < plain.loss * 0.95  # heavy-tailed groups: a shrunk range rounds the bulk better
    assert torch.equal(torch.from_numpy(clipped.weight.dequantize()), clipped.dequantized)
    one = quantize_clipped(weight, ClipSpec(spec, grid=1, min_ratio=1.0))  # only ratio 1: plain RTN
    assert torch.equal(one.dequantized, plain.dequantized)


def test_qhf_load_quantize_save_reload(plugin_site: Path, tiny_llama: Path, tmp_path: Path) -> None:
    import qhf
    from qhf.config_view import algorithm

    qm = qhf.load(tiny_llama, {"method": "rtn_clip", "bits": 4, "group_size": 32, "clip_grid": 8})
    assert algorithm(qm.config) == "rtn_clip" and qm.config.settings == {"clip_grid": 8, "clip_min_ratio": 0.5}
    summary = qm.quantize()
    assert summary.method == "rtn_clip" and summary.calibration is None and summary.modules == 14
    out = tmp_path / "q"
    saved = qm.save(out)  # verified against the in-memory model by default
    assert isinstance(saved.verification, dict)
    stored = json.loads((out / "quantize_config.json").read_text(encoding="utf-8"))
    assert stored["quant_method"] == "gptq" and stored["format"] == "gptq"
    assert stored["meta"]["algorithm"] == "rtn_clip"
    assert (stored["clip_grid"], stored["clip_min_ratio"]) == (8, 0.5)
    reloaded = qhf.load_quantized(out)
    assert algorithm(reloaded.config) == "rtn_clip"  # the installed method reads its own settings back
    assert reloaded.config.settings == {"clip_grid": 8, "clip_min_ratio": 0.5}
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = qm.model(input_ids=ids).logits
        got = reloaded.model(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-4), float((got - expected).abs().max())


def test_cli_quantize_with_the_plugin(plugin_site: Path, tiny_llama: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(plugin_site), str(PLUGIN_SRC), os.environ.get("PYTHONPATH", "")]),
    }
    out = tmp_path / "cli"
    args = ["quantize", str(tiny_llama), "--method", "rtn_clip", "--bits", "4", "--group-size", "32"]
    run = subprocess.run(
        [sys.executable, "-m", "lowbit", *args, "--clip-grid", "6", "--setting", "clip_min_ratio=0.6",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "quantize     rtn_clip 4-bit group 32 sym -> format gptq" in run.stdout
    stored = json.loads((out / "quantize_config.json").read_text(encoding="utf-8"))
    assert stored["meta"]["algorithm"] == "rtn_clip" and stored["clip_grid"] == 6 and stored["clip_min_ratio"] == 0.6
    other = subprocess.run(
        [sys.executable, "-m", "lowbit", "quantize", str(tiny_llama), "--clip-grid", "6", "--out", str(tmp_path / "g")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    refused = "--clip-grid: an rtn_clip setting; not with --method gptq (taken by --method rtn_clip)"
    assert other.returncode == 2 and refused in other.stderr, other.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "lowbit", *args, "--setting", "clip_grd=6", "--out", str(tmp_path / "bad")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert bad.returncode == 2 and "clip_grd: not a setting of method 'rtn_clip'" in bad.stderr, bad.stderr
    flag = subprocess.run(
        [sys.executable, "-m", "lowbit", *args, "--damp-percent", "0.1", "--out", str(tmp_path / "flag")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert flag.returncode == 2 and "--damp-percent not a setting of this method" in flag.stderr, flag.stderr
    assert "clip_grid, clip_min_ratio" in flag.stderr
