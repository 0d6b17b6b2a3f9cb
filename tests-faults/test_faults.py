"""The fault session (``nox -s faults``, outside CI): kill publish and convert at every fault point on both
publish paths, and mutate a checkpoint through every reader, printing the outcome counts.

Outcomes: *refused by name* (an error of the toolkit naming the directory, file, tensor or rule; for
``inspect``, a violation or warning naming it), *loaded identical* (what the reader gives equals what it
gives for the clean checkpoint), *anything else* (a different result, a traceback of another kind, a hang).
Each test fails when anything else happened, after printing every such case.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faults_fixtures import (
    IDENTICAL,
    OTHER,
    REFUSED,
    copy_dir,
    files_of,
    hang_guard,
    killed,
    print_tally,
    quantized_tensors,
    tiny_source,
    write_quantized,
)
from qformats.checkpoint import Checkpoint, fault_points, publish
from qformats.errors import QFormatsError

PATHS = ("exchange", "fallback")
logging.getLogger("qformats").setLevel(logging.ERROR)  # the fallback's warning, once per fault point, is noise here


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("faults")
    source = tiny_source(root / "source")
    clean = quantized_tensors(source)
    newer = {k: (v + np.float16(0.001)).astype(v.dtype) if k.endswith(".scales") else v for k, v in clean.items()}
    write_quantized(source, root / "old", clean, shard="40KB")
    (root / "old" / "README.md").write_text("the user's notes\n")
    write_quantized(source, root / "new", newer)
    return {"root": root, "source": source, "clean": clean, "newer": newer}


def _snapshot(path: Path) -> dict[str, bytes]:
    ck = Checkpoint(path)
    data = {n: ck.load(n).tobytes() for n in ck.weight_map}
    data.update({n: (path / n).read_bytes() for n in ("config.json", "quantize_config.json", "tokenizer.json")})
    return data


def _named(exc: BaseException, *names: str) -> bool:
    text = str(exc)
    return any(n and n in text for n in names) or re.search(r"\[[A-Z0-9]+-[A-Z0-9-]+\]", text) is not None


@pytest.mark.parametrize("path", PATHS)
def test_publish_killed_at_every_point(world: dict[str, Any], path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path == "fallback":
        monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    root, source = world["root"], world["source"]
    old, new = _snapshot(root / "old"), _snapshot(root / "new")
    traced = copy_dir(root / "old", root / f"trace-{path}" / "out")
    with fault_points.recording() as trace:
        write_quantized(source, traced, world["newer"])
    tally: Counter[str] = Counter()
    others: list[str] = []
    for i, (point, hit) in enumerate(list(trace)):
        target = copy_dir(root / "old", root / f"publish-{path}-{i}" / "out")
        if not killed(point, hit, lambda target=target: write_quantized(source, target, world["newer"])):
            others.append(f"{point}#{hit}: the writer was not killed")
            continue
        try:
            found = _snapshot(target)
        except QFormatsError as exc:
            tally[REFUSED if _named(exc, str(target)) else OTHER] += 1
        else:
            same = found in (old, new) and (target / "README.md").read_text() == "the user's notes\n"
            tally[IDENTICAL if same else OTHER] += 1
            if not same:
                others.append(f"{point}#{hit}: neither the old nor the new checkpoint (or the README lost)")
        write_quantized(source, target, world["newer"])  # the next save recovers and publishes
        leftovers = sorted(p.name for p in target.parent.iterdir())
        if _snapshot(target) != new or not (target / "README.md").is_file() or leftovers != [".out.lock", "out"]:
            tally[OTHER] += 1
            others.append(f"{point}#{hit}: the next save did not restore + publish cleanly ({leftovers})")
    print_tally(f"publish ({path}, {len(trace)} fault points)", tally, others)
    assert tally[OTHER] == 0 and not others


def _convert(source: Path, out: Path) -> tuple[int, str]:
    from lowbit.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["convert", str(source), "--to", "gptq_v2", "--out", str(out)])
    return code, err.getvalue()


@pytest.mark.parametrize("path", PATHS)
def test_convert_killed_at_every_point(world: dict[str, Any], path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``convert`` writes a new (or empty) ``--out``: one rename publishes it; both settings are run."""
    if path == "fallback":
        monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    root = world["root"]
    clean_out = root / f"convert-clean-{path}" / "out"
    with fault_points.recording() as trace:
        assert _convert(root / "new", clean_out)[0] == 0
    expected = files_of(clean_out)
    assert "tokenizer.json" in expected and "generation_config.json" in expected
    tally: Counter[str] = Counter()
    others: list[str] = []
    for i, (point, hit) in enumerate(list(trace)):
        out = root / f"convert-{path}-{i}" / "out"
        if not killed(point, hit, lambda out=out: _convert(root / "new", out)):
            others.append(f"{point}#{hit}: convert was not killed")
            continue
        if out.exists() and files_of(out) == expected:
            tally[IDENTICAL] += 1
        else:
            try:
                Checkpoint(out)
            except QFormatsError as exc:
                tally[REFUSED if _named(exc, str(out)) else OTHER] += 1
            else:
                tally[OTHER] += 1
                others.append(f"{point}#{hit}: an output that reads but is not the complete conversion")
        shutil.rmtree(out, ignore_errors=True)
        code, err = _convert(root / "new", out)  # the rerun succeeds
        if code != 0 or files_of(out) != expected:
            tally[OTHER] += 1
            others.append(f"{point}#{hit}: the rerun failed ({err.strip()[:200]})")
    print_tally(f"convert ({path}, {len(trace)} fault points)", tally, others)
    assert tally[OTHER] == 0 and not others


# -- mutations ------------------------------------------------------------------------------------


def _rewrite(world: dict[str, Any], change: Callable[[dict[str, np.ndarray]], None]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        tensors = {k: v.copy() for k, v in world["clean"].items()}
        change(tensors)
        shutil.rmtree(path)
        write_quantized(world["source"], path, tensors)

    return apply


def _flip(tensor: str, at: int = 5) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        ck = Checkpoint(path)
        shard = ck.files[ck.weight_map[tensor]]
        data = bytearray(shard.path.read_bytes())
        data[shard.tensors[tensor].start + at] ^= 0x10
        shard.path.write_bytes(bytes(data))

    return apply


def _header_flip(at: int) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        data = bytearray((path / "model.safetensors").read_bytes())
        data[8 + at] = ord("7") if data[8 + at] != ord("7") else ord("3")
        (path / "model.safetensors").write_bytes(bytes(data))

    return apply


def _file(name: str, content: bytes) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        (path / name).write_bytes(content)

    return apply


def _link(name: str, target: Callable[[Path], Path]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        real = target(path)
        if (path / name).exists() and not real.exists():
            shutil.copy(path / name, real)
        (path / name).unlink()
        (path / name).symlink_to(real)

    return apply


def _fifo(path: Path) -> None:
    (path / "model.safetensors").unlink()
    os.mkfifo(path / "model.safetensors")


def _append(path: Path) -> None:
    with (path / "model.safetensors").open("ab") as handle:
        handle.write(b"\0" * 8)


def _truncate(path: Path) -> None:
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:-1])


def _dynamic(pattern: str) -> Callable[[Path], None]:
    import json

    def apply(path: Path) -> None:
        config = json.loads((path / "quantize_config.json").read_text())
        config["dynamic"] = {f"-:{pattern}": {}}
        (path / "quantize_config.json").write_text(json.dumps(config))

    return apply


def _mutations(world: dict[str, Any]) -> dict[str, Callable[[Path], None]]:
    clean = world["clean"]
    first = {s: next(n for n in sorted(clean) if n.endswith(s)) for s in (".qweight", ".scales", ".qzeros", ".g_idx")}

    def set_value(name: str, value: float) -> Callable[[dict[str, np.ndarray]], None]:
        return lambda t: t[name].__setitem__((0, 1), value)

    def drop_layer(t: dict[str, np.ndarray]) -> None:
        for n in [n for n in t if ".layers.1." in n]:
            del t[n]

    def extra_layer(t: dict[str, np.ndarray]) -> None:
        t.update({n.replace(".layers.1.", ".layers.2."): v for n, v in list(t.items()) if ".layers.1." in n})

    def all_zero(t: dict[str, np.ndarray]) -> None:
        for n in t:
            t[n] = np.zeros_like(t[n])

    def sym_zeros(t: dict[str, np.ndarray]) -> None:
        t[first[".qzeros"]] = np.zeros_like(t[first[".qzeros"]]) + np.int32(0x33333333)

    outside = lambda path: path.parent / f"{path.name}-outside.bin"  # noqa: E731
    mutations: dict[str, Callable[[Path], None]] = {
        f"flip {n}": _flip(n) for n in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight")
    }
    mutations.update({f"flip {n}": _flip(n) for n in first.values()})
    mutations.update({f"header byte {at}": _header_flip(at) for at in (40, 90, 200)})
    mutations.update(
        {
            "truncated shard": _truncate,
            "trailing bytes": _append,
            "nan in embed_tokens": _rewrite(world, set_value("model.embed_tokens.weight", np.nan)),
            "inf scale": _rewrite(world, set_value(first[".scales"], np.inf)),
            "zero scale": _rewrite(world, set_value(first[".scales"], 0.0)),
            "wrong sym zeros": _rewrite(world, sym_zeros),
            "every tensor zero": _rewrite(world, all_zero),
            "dropped layer": _rewrite(world, drop_layer),
            "extra layer": _rewrite(world, extra_layer),
            "deleted qweight": _rewrite(world, lambda t: t.__delitem__(first[".qweight"])),
            "shard is a FIFO": _fifo,
            "shard linked outside": _link("model.safetensors", outside),
            "config.json linked to /etc/hostname": _link("config.json", lambda p: Path("/etc/hostname")),
            "tokenizer.json linked outside": _link("tokenizer.json", outside),
            "quantize_config.json not UTF-8": _file("quantize_config.json", b'{"bits": 4, "x": "\xff"}'),
            "quantize_config.json nested": _file("quantize_config.json", b"[" * 100000 + b"]" * 100000),
            "nested bounded repeats": _dynamic("(?:.{1,40}){1,40}X$"),
            "INCOMPLETE marker": _file("INCOMPLETE", b"x"),
        }
    )
    return mutations


def _state(model: Any) -> dict[str, bytes]:
    return {k: v.detach().contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes()
            for k, v in model.state_dict().items()}  # fmt: skip


def _readers(scratch: Path) -> dict[str, Callable[[Path], Any]]:
    """reader name -> function giving a comparable result (raises to refuse)."""
    import qhf
    from lowbit.cli.model_loading import load_for_eval
    from qformats.inspect import inspect

    def run_inspect(path: Path) -> Any:
        summary = inspect(path).to_dict()
        if summary["violation_count"] or summary["warnings"]:
            raise QFormatsError(f"{path}: reported " + "; ".join([*summary["other_violations"], *summary["warnings"]]))
        summary.pop("path")
        return summary

    def run_export(path: Path) -> Any:
        out = scratch / f"export-{len(list(scratch.iterdir()))}"
        qhf.export_dense(path, out)
        return {k: v for k, v in files_of(out).items() if k.endswith(".safetensors")}

    def run_convert(path: Path) -> Any:
        out = scratch / f"convert-{len(list(scratch.iterdir()))}"
        code, err = _convert(path, out)
        if code != 0:
            raise QFormatsError(err.strip())
        return files_of(out)

    return {
        "inspect": run_inspect,
        "load_quantized": lambda p: _state(qhf.load_quantized(p).model),
        "eval (load_for_eval)": lambda p: _state(load_for_eval(p).model),
        "export_dense": run_export,
        "convert": run_convert,
    }


def _identical(reader: str, got: Any, clean: Any) -> bool:
    if reader in ("export_dense", "convert"):  # what the clean checkpoint gives, given identically
        return all(got.get(k) == v for k, v in clean.items())
    return bool(got == clean)


def test_mutations_through_every_reader(world: dict[str, Any], tmp_path: Path) -> None:
    from qhf.errors import QHFError

    root = tmp_path
    clean_dir = write_quantized(world["source"], root / "clean", world["clean"])
    scratch = root / "scratch"
    scratch.mkdir()
    readers = _readers(scratch)
    baseline = {name: read(clean_dir) for name, read in readers.items()}
    totals: Counter[str] = Counter()
    others: list[str] = []
    for name, read in readers.items():
        tally: Counter[str] = Counter()
        for i, (label, mutate) in enumerate(_mutations(world).items()):
            path = copy_dir(clean_dir, root / f"m-{name.split()[0]}-{i}" / "c")
            mutate(path)
            try:
                with hang_guard(f"{name} on {label}"):
                    got = read(path)
            except (QFormatsError, QHFError) as exc:
                named = _named(exc, str(path), "model.safetensors", "config.json", "tokenizer.json")
                tally[REFUSED if named else OTHER] += 1
                if not named:
                    others.append(f"{name} / {label}: refused without a name: {exc}")
            except Exception as exc:  # the fault session counts every other failure instead of stopping
                tally[OTHER] += 1
                others.append(f"{name} / {label}: {type(exc).__name__}: {str(exc)[:200]}")
            else:
                same = _identical(name, got, baseline[name])
                tally[IDENTICAL if same else OTHER] += 1
                if same:
                    print(f"    {name} / {label}: {IDENTICAL}", flush=True)
                if not same:
                    others.append(f"{name} / {label}: loaded, but not what the clean checkpoint gives")
        print_tally(f"mutations through {name} ({sum(tally.values())})", tally, [])
        totals.update(tally)
    print_tally(f"mutations, all readers ({sum(totals.values())})", totals, others)
    assert totals[OTHER] == 0
