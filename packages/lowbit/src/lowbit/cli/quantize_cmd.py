"""``lowbit quantize SOURCE ... --out DIR``: qhf's load -> quantize -> save, with a report at the end.

The work is qhf's (``qhf.load(...).quantize(...).save(...)``); this module turns flags into its
arguments and prints: the calibration used, a per-layer table (loss, tokens, damp, fallbacks), size
before and after, wall time and where the result is. With ``--checkpoint-dir`` the run commits a
qcheckpoint generation at layer boundaries; Ctrl-C or SIGTERM stops at the next boundary (qlooper's
cooperative stop) and the message gives the exact command that resumes it. Before any model is loaded,
``--out`` is checked (:mod:`lowbit.cli.output_guard`: separate from ``--checkpoint-dir``, writable, enough
free space) and locked for the run. The run passes ``keep_in_memory="auto"`` to qhf: a model whose decoder
layers exceed 2 GiB in the compute dtype streams each finished layer to a ``qhf-spill-*`` directory beside
``--out`` (removed at the end), so peak memory stays flat in depth (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .calibration_input import calibration_rows
from .device_flags import check_compute_flags
from .gguf_file_out import is_gguf_path, quantize_to_gguf_file
from .main import EXIT_STOPPED
from .output_guard import check_output, output_lock
from .quantize_flags import preset_target_fields, quant_config, quant_method
from .save_flags import check_save_flags

if TYPE_CHECKING:
    from qhf.summary import QuantizeSummary
    from qlooper.report import ModuleReport

from .report_tables import (
    PER_LAYER_HEADERS,
    describe_source,
    generation_text,
    human_bytes,
    path_bytes,
    per_layer_rows,
    render_table,
    rotation_text,
)


def _check_args(args: argparse.Namespace) -> None:
    """Flag checks that need no model (run before torch is imported, so bad arguments fail fast)."""
    if not Path(args.source).exists():
        raise UsageError(f"quantize: source {args.source!r} does not exist (expected a HF model directory or a .gguf)")
    if args.target is not None:
        from qformats.engines import EngineTargetError, kernels_for

        try:
            kernels_for(args.target)
        except EngineTargetError as exc:
            raise UsageError(f"--target: {exc}") from None
    if args.resume and args.checkpoint_dir is None:
        raise UsageError("--resume needs --checkpoint-dir (the directory the stopped run committed its checkpoint to)")
    _check_out_empty(args.out)
    method = quant_method(args.method)
    check_output(args.out, args.checkpoint_dir, args.source, method.default_bits if args.bits is None else args.bits)
    if args.ray is not None and not method.spreads_over_ray:
        raise UsageError(f"--ray: {args.method} runs no calibration forwards and no spread solves; drop --ray")
    check_save_flags(args)
    check_compute_flags(args)
    if args.plot is not None:
        from .plots import check_png_path, require_matplotlib

        require_matplotlib("--plot")
        check_png_path(args.plot, "--plot")


def _check_out_empty(out_arg: str) -> None:
    out = Path(out_arg)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out_arg}: exists and is not an empty directory; choose a new output directory")


def _checkpoint_config(args: argparse.Namespace) -> Any:
    if args.checkpoint_dir is None:
        return None
    from qcheckpoint import CheckpointConfig

    return CheckpointConfig(
        path=args.checkpoint_dir,
        resume="required" if args.resume else "never",
        interval=f"layer:{args.checkpoint_interval}",
    )


def resume_command(argv: list[str]) -> str:
    """The command line that resumes the run started with ``argv`` (adds ``--resume`` once)."""
    rest = [a for a in argv if a != "--resume"]
    return shlex.join(["lowbit", *rest, "--resume"])


def _describe_calibration(summary: QuantizeSummary, fallback: str) -> str:
    source = summary.calibration_source
    stats = summary.calibration
    counts = f"{stats.rows} rows, {stats.tokens} tokens" if stats is not None else ""
    if isinstance(source, Mapping):
        name = describe_source(dict(source))
        return f"{name} ({counts})" if counts else name
    return f"{fallback} ({counts})" if counts else fallback


def _apply_target(args: argparse.Namespace, qm: Any, config: dict[str, Any]) -> tuple[Any, str]:
    """Plan ``--target`` on the lazily opened source (no weight read): the same model when the settings
    fit, else one reopened with the adjusted settings (``args.dtype`` too); a target no setting change can
    satisfy raises ``qformats.engines.EngineTargetError`` (exit status 2)."""
    import qhf
    from qformats.engines import plan_target
    from qhf.engine_facts import planned_facts

    from .engine_lines import target_changes_text

    formats = quant_method(args.method).formats
    plan = plan_target(planned_facts(qm, args.dtype), args.target, formats=formats)
    line = target_changes_text(args.target, plan)
    changes = dict(plan.changes)
    if "dtype" in changes:
        args.dtype = str(changes.pop("dtype")[1])
    if changes:
        config = {**config, **{name: new for name, (_old, new) in changes.items()}}
        qm = qhf.load(args.source, config)
    _check_candidate_widths(args.target, planned_facts(qm, args.dtype), qm.config.settings.get("bits_candidates"))
    return qm, line


def _check_candidate_widths(target: str, facts: Any, candidates: list[int] | None) -> None:
    """With ``--bits-budget``, every candidate width must load on ``target`` as the planned settings stand (a
    module may get any of them); else ``UsageError`` naming the widths and the target's reason."""
    if not candidates:
        return
    from qformats.engines import EngineTargetError, plan_target

    refused = []
    for bits in candidates:
        try:
            changes = plan_target(facts.changed(bits=bits), target, formats=(facts.format,)).changes
        except EngineTargetError as exc:
            refused.append(f"{bits}-bit ({exc})")
            continue
        if any(name != "dtype" for name in changes):
            refused.append(f"{bits}-bit (needs {', '.join(sorted(changes))} changed)")
    if refused:
        raise UsageError(
            f"--target {target}: with --bits-budget any module may get any candidate width; the target does not "
            f"load {'; '.join(refused)}. Pass --bits-candidates with widths it reads"
        )


def _executor(args: argparse.Namespace) -> Any:
    """The qlooper executor ``--ray`` asks for (None: this process)."""
    if args.ray is None:
        return None
    from qlooper.errors import ExecutorError
    from qlooper.ray_executor import RayExecutor

    try:
        return RayExecutor(args.ray, workers=args.ray_workers)
    except ExecutorError as exc:
        raise UsageError(f"--ray {args.ray}: {exc}") from None


def _module_rows(qm: Any) -> list[ModuleReport]:
    """The run's report rows in the order of its modules (as quant_log.csv lists them)."""
    if qm.run is None or not qm.results:
        return []
    by_name = {row.module: row for row in qm.run.report}
    return [by_name[name] for name in qm.results if name in by_name]


def _parameter_count(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def run(args: argparse.Namespace) -> int:
    if is_gguf_path(args.out):
        return quantize_to_gguf_file(args, _run_directory)
    return _run_directory(args)


def _save(qm: Any, args: argparse.Namespace) -> QuantizeSummary:
    """``qm.save`` with a phase line before and after on stderr (unless ``--quiet``)."""
    quiet = args.quiet
    what = "writing and verifying" if not args.no_verify else "writing"
    if not quiet:
        print(f"save: {what} {len(qm.results or {})} quantized modules to {args.out}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    summary: QuantizeSummary = qm.save(
        args.out, max_shard_size=args.max_shard_size, verify=not args.no_verify, dtype=args.dtype
    )
    if not quiet:
        print(f"save: done, elapsed {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    return summary


def _run_directory(args: argparse.Namespace) -> int:
    _check_args(args)
    with output_lock(args.out):
        _check_out_empty(args.out)  # again, now that no other run can be writing it
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import qhf
    from qcheckpoint import ResumePolicyError
    from qhf.config_view import algorithm, awq_scales, is_weight_only, needs_calibration
    from qlooper.errors import RunStopped

    wall = time.perf_counter()
    config = quant_config(args)
    qm = qhf.load(args.source, config)
    target_line = None
    if args.target is not None:
        qm, target_line = _apply_target(args, qm, config)
    params = _parameter_count(qm.model)
    source_bytes = path_bytes(args.source)
    print(
        f"source       {args.source} ({qm.source.config.model_type}, {qm.source.num_layers} layers, "
        f"{params / 1e6:.1f}M parameters, {human_bytes(source_bytes)} on disk)",
        flush=True,
    )
    cfg = qm.config
    method, calibrated = algorithm(cfg), needs_calibration(cfg)
    if target_line is not None:
        print(target_line, flush=True)
    added_line = preset_adapter_text(args, cfg)
    if added_line is not None:
        print(added_line, flush=True)
    if is_weight_only(cfg):
        line = f"quantize     {method} {cfg.width}-bit -> format {cfg.format} (weight-only)"
        print(line, flush=True)
    else:
        scaled = " on AWQ-scaled weights" if awq_scales(cfg) else ""
        budget = cfg.settings.get("bits_budget")
        mixed = f", widths {cfg.settings['bits_candidates']} within {budget} bits/weight" if budget is not None else ""
        print(
            f"quantize     {method}{scaled} {cfg.width}-bit group {cfg.group_size} "
            f"{'sym' if cfg.sym else 'asym'} -> format {cfg.format}{mixed}",
            flush=True,
        )
    calibration, described = None, "none (rtn needs no calibration)"
    if calibrated:
        calibration, described = calibration_rows(
            args.calibration, qm.tokenizer, samples=args.samples, length=args.length
        )
        if calibration is None:
            described = f"no calibration given: using {described}"
        print(f"calibration  {described}", flush=True)
    executor = _executor(args)
    if executor is not None:
        print(f"executor     ray at {args.ray}: {', '.join(w['name'] for w in executor.identities)}", flush=True)
    try:
        summary = qm.quantize(
            calibration,
            samples=args.samples,
            length=args.length,
            batch_size=args.batch_size,
            checkpoint=_checkpoint_config(args),
            progress=not args.quiet,
            backend=args.backend,
            executor=executor,
            device=args.device,
            compute_dtype=args.compute_dtype,
            cache_device=args.cache_device,
            keep_in_memory="auto",  # large models stream their finished layers to a spill beside --out
            spill_dir=Path(args.out).absolute().parent,
        )
    except ResumePolicyError as exc:
        hint = (
            "there is no checkpoint to resume: run without --resume to start"
            if args.resume
            else "it holds an earlier run's checkpoint: add --resume to continue it, or delete it to start over"
        )
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir}: {hint} ({exc})") from None
    except RunStopped as exc:
        print(f"lowbit quantize: stopped: {exc}", file=sys.stderr)
        print(f"resume with:  {resume_command(list(args.argv))}", file=sys.stderr)
        return EXIT_STOPPED
    except KeyboardInterrupt:
        hint = "" if args.checkpoint_dir else "; add --checkpoint-dir DIR to make the run resumable"
        print(f"lowbit quantize: interrupted; nothing was saved{hint}", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        if executor is not None:
            executor.close()
    summary = _save(qm, args)
    rows = _module_rows(qm)
    print()
    print(render_table(PER_LAYER_HEADERS, per_layer_rows(rows)))
    print()
    if calibrated:
        print(f"calibration  {_describe_calibration(summary, described)}")
        generated = (
            generation_text(dict(summary.calibration_source))
            if isinstance(summary.calibration_source, Mapping)
            else None
        )
        if generated is not None:
            print(f"generation   {generated}")
    if summary.resumed_from:
        print(f"resumed      from plan step {summary.resumed_from} ({args.checkpoint_dir})")
    lost = (summary.executor or {}).get("lost_workers") or []
    for worker in lost:
        where = f"pid {worker['pid']} on {worker['host']}"
        print(f"lost worker  {worker['name']} ({where}) during {worker['during']}; replaced")
    if summary.mixed_precision is not None:
        print(f"widths       {mixed_precision_text(summary.mixed_precision)}")
    fallbacks = summary.fallbacks
    print(f"fallbacks    {len(fallbacks)}" + (f": {', '.join(fallbacks)}" if fallbacks else ""))
    if summary.rotation is not None:
        print(f"rotation     {rotation_text(summary.rotation)}")
    saved = summary.saved
    print(
        f"size before  {human_bytes(source_bytes)} on disk; dense {human_bytes(params * 4)} at float32, "
        f"{human_bytes(params * 2)} at float16"
    )
    after = saved.bytes if saved is not None else 0
    print(f"size after   {human_bytes(after)} on disk ({after / (params * 2):.2f}x the float16 size)")
    print(f"dense dtype  {summary.dense_dtype} (non-quantized tensors and config.json; --dtype to choose)")
    verification = summary.verification
    if isinstance(verification, Mapping):
        print(f"verified     {'passed' if summary.verified else 'FAILED'} (reloaded and compared)")
    else:
        print(f"verified     {verification}")
    print(
        f"time         {time.perf_counter() - wall:.1f} s (calibration {summary.calibration_seconds or 0:.1f} s, "
        f"quantize {summary.quantize_seconds:.1f} s, save {saved.seconds if saved is not None else 0:.1f} s)"
    )
    from qformats.errors import QFormatsError

    from .engine_lines import directory_verdicts, engines_text

    if getattr(args, "gguf_file_out", None) is None:  # a .gguf output reports its own engines and path
        try:
            print(engines_text(directory_verdicts(args.out)))
        except QFormatsError as exc:  # qformats.inspect does not resolve GGUF-method module dimensions
            print(f"engines      not assessed: qformats cannot inspect this {method} directory ({exc})")
        print(f"result       {Path(args.out).resolve()}  (per-module log: quant_log.csv, summary: quant_report.json)")
    if args.plot is not None:
        from .plots import plot_module_losses

        title = f"{Path(args.source).name}: {method} {cfg.width}-bit g{cfg.group_size}"
        print(f"plot         {plot_module_losses(rows, Path(args.plot), title)}")
    if args.checkpoint_dir:
        print(f"checkpoint   {args.checkpoint_dir} is no longer needed; delete it to free the space")
    if args.verbose:
        print(json.dumps(summary.report_dict(), indent=2, default=str))
    return 0


def preset_adapter_text(args: argparse.Namespace, cfg: Any) -> str | None:
    """The ``adapter`` line when ``--preset`` added an EoRA adapter for ``--target`` (None otherwise): its rank,
    where it is saved and how vLLM serves it."""
    from qhf.config_view import adapter

    if preset_target_fields(args).get("adapter") is None:
        return None
    record = adapter(cfg)
    if record is None:  # --eora-rank 0
        return None
    rank, path = record["rank"], Path(args.out) / record["path"]
    return (
        f"adapter      EoRA rank {rank} (--preset {args.preset} for --target {args.target}, which loads LoRA "
        f"adapters; --eora-rank 0 leaves it out), saved to {path}; vLLM: --enable-lora --max-lora-rank {rank} "
        f"--lora-modules eora={path}"
    )


def mixed_precision_text(record: Mapping[str, Any]) -> str:
    """One line of a ``--bits-budget`` run's record: achieved and budgeted stored bits per weight, modules per
    width, and where the widths came from."""
    counts = ", ".join(f"{n} at {b}-bit" for b, n in record["modules_by_bits"].items())
    how = "dynamic rules as given" if record.get("rules") == "as given" else f"{record.get('rules', 0)} dynamic rules"
    return (
        f"{record['bits_per_weight']:.4f} stored bits/weight (budget {record['bits_budget']}): {counts}; {how} "
        "(per module: quant_report.json)"
    )
