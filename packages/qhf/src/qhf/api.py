"""The public API: ``load`` a source with a quantization config, ``quantize``, ``save``, export, evaluate.

Typical use::

    qm = qhf.load("path/to/hf-model", {"method": "gptq", "bits": 4, "group_size": 128})
    qm.quantize()                     # no data given: the model's own samples + CPython's bundled docs
    qm.save("out/")                   # shards + index + configs + tokenizer + report; verified by default
    lm = qhf.load_quantized("out/")   # qkernels modules; lm.generate(...)
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from .config_view import (
    adapter,
    algorithm,
    awq_scales,
    method_of,
    needs_calibration,
    rotation,
    solver_variant,
)
from .corpus import bundled_docs
from .errors import StateError
from .perplexity import PerplexityResult, evaluate
from .quant_config import read_quantize_config
from .results import QuantizedModules
from .source import OpenedSource, open_source
from .spill import SpillArea
from .summary import CalibrationStats, QuantizeSummary, SavedCheckpoint
from .tokenizer import encode, load_gguf_tokenizer, load_tokenizer

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig
    from qlooper.api import QuantizationRun

AUTO = "auto"

logger = logging.getLogger(__name__)


class QuantModel:
    """A source opened for quantization. Attributes: ``source``, ``config`` (the run's quantization config,
    :func:`qhf.quant_config.read_quantize_config`), ``tokenizer``; after
    :meth:`quantize`: ``run`` (qlooper's ``QuantizationRun``: per-module report rows ``run.report``),
    ``results`` (module name -> qlooper ``FinalizedModule``: logical weight, packed tensors, bias) and
    ``summary`` (the run's :class:`~qhf.summary.QuantizeSummary`: calibration, time, memory; after
    :meth:`save` also the written files and the verification)."""

    def __init__(self, source: OpenedSource, config: QuantizeConfig, tokenizer: Any) -> None:
        self.source = source
        self.config = config
        self.tokenizer = tokenizer
        #: The default calibration mixture's record (counts, settings, hashes), written to the stored config's
        #: ``meta.calibration``: a fact of the run, not a setting.
        self.calibration_record: dict[str, Any] | None = None
        #: The folded rotation's record (:mod:`qhf.rotation`), written to ``meta.rotation``; None: no rotation.
        self.rotation_record: dict[str, Any] | None = None
        self.run: QuantizationRun | None = None
        self.results: QuantizedModules | None = None
        self.summary: QuantizeSummary | None = None
        self._calibration_source: dict[str, Any] | str | None = None
        self._tokenizer_note: str | None = None
        #: A streaming run's spill area (:mod:`qhf.spill`); None when the quantized model is in memory.
        self.spill: SpillArea | None = None
        self._replacer: Any = None

    @property
    def settings(self) -> QuantizeConfig:
        """Deprecated name of :attr:`config` (``DeprecationWarning``)."""
        warnings.warn("QuantModel.settings is deprecated; use .config", DeprecationWarning, stacklevel=2)
        return self.config

    @property
    def model(self) -> nn.Module:
        return self.source.model

    def quantize(
        self,
        calibration: Any = None,
        *,
        samples: int = 128,
        length: int = 256,
        batch_size: int = 1,
        checkpoint: Any = None,
        progress: bool = False,
        backend: str = AUTO,
        lockstep: bool = True,
        lockstep_budget: int | Literal["auto"] | None = "auto",
        executor: Any = None,
        device: str | torch.device | None = None,
        compute_dtype: str | torch.dtype = "float32",
        cache_device: str | torch.device = "cpu",
        keep_in_memory: bool | Literal["auto"] = True,
        spill_dir: str | Path | None = None,
    ) -> QuantizeSummary:
        """Quantize every linear of every decoder layer, layer by layer; returns the run's
        :class:`~qhf.summary.QuantizeSummary` (also kept as ``self.summary``; qlooper's run as ``self.run``).

        ``calibration``: None (the default mixture, :class:`qhf.calibration.DefaultCalibration`: ``samples``
        blocks of ``length`` tokens cut from the bundled docs' calibration slice plus ``samples`` rows the
        model samples itself with a fixed seed), a ``DefaultCalibration`` to change that mixture, or anything
        qlooper's ``prepare_calibration`` accepts (strings, token-id lists, dicts with ``input_ids``, chat
        messages). RTN and the weight-only methods (FP8, bitsandbytes, GGUF) need none and ignore it. The summary's
        ``calibration_seconds`` (building the calibration, generation included) is apart from ``quantize_seconds``.
        ``checkpoint``: a ``qcheckpoint.CheckpointConfig`` for resumable runs. ``backend``: the qkernels backend of
        the in-memory quantized modules. ``lockstep``: GPTQ runs each layer once per batch, paused before every group
        (qlooper ``LoopOptions.lockstep``: same numbers, about 3x fewer layer forwards, every batch's activations live
        at once); ``False`` for per-group forwards when memory is tighter than time. ``lockstep_budget``: bytes
        the parked activations may take; a layer over it runs per-group forwards (same numbers), listed in the
        summary's ``lockstep_skipped`` (qlooper ``LoopOptions.lockstep_budget``; ``"auto"``, the default: the
        model's weights outside its decoder layers plus its largest layer, at least 512 MiB; None: no limit).
        ``executor``: where the forwards and solves run (qlooper ``LoopOptions.executor``, e.g. a
        ``qlooper.ray_executor.RayExecutor``; same numbers as one process); None runs in this process. The
        summary's ``executor`` says which ran and names any worker that was lost and replaced.
        ``device``: where each decoder layer runs its forwards and Hessian statistics (qlooper
        ``LoopOptions.device``; None: ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``); the layer is moved
        there for its work and back to the CPU after, packed results and the in-memory quantized modules are on
        the CPU. ``compute_dtype``: the layer forwards' dtype (``"float32"``, the default and the checkpoints'
        reference numbers; ``"bfloat16"`` / ``"float16"``: faster forwards where the hardware has them, statistics
        and solves still float32; part of resume identity; GPTQ only). ``cache_device``: where the calibration
        cache (every batch's layer inputs) is kept. A device that does not exist, or a dtype not offered, raises
        qlooper's ``DeviceError`` (naming the argument, the value and what is available) before any work; the
        summary's ``compute`` records the three.

        ``keep_in_memory``: True (the default) keeps the quantized model in memory (its linears qkernels modules:
        :meth:`perplexity` and generation work after quantize; memory grows with depth). False streams: each
        finished layer is written to a spill area (:mod:`qhf.spill`, a ``qhf-spill-*`` directory under
        ``spill_dir``, default the system temp directory, removed with this object) and sent back to meta, so
        peak memory is flat in depth; :meth:`save` reads the spill and writes the same bytes. ``"auto"``
        streams when the decoder layers take more than :data:`qhf.resources.STREAM_ABOVE_BYTES` in the compute
        dtype (``lowbit quantize`` passes ``"auto"``); a run with an EoRA adapter keeps the model in memory
        (``False`` is refused for it). Before calibration or any layer the run's peak RAM (and,
        streaming, the spill's disk bytes) is estimated and a machine that cannot hold it is refused
        (:class:`~qhf.errors.InsufficientResourcesError`, :mod:`qhf.resources`).

        A config with a ``rotation`` setting (:mod:`qhf.rotation`) first verifies the fold on a float64 replica
        (a part asked for explicitly that does not verify raises :class:`~qhf.errors.RotationError`), builds the
        calibration rows from the unrotated model (kind ``"learned"`` then optimizes the residual rotation on
        them, :mod:`qhf.rotation.learn`), then reads every weight rotated; the summary's ``rotation`` records what
        applied (and a tied output projection that became untied).
        """
        from qlooper.allocator import release_free_memory
        from qlooper.api import quantize_model
        from qlooper.devices import DeviceError, resolve_compute_dtype, resolve_device
        from qlooper.kernels import kernel_replacer
        from qlooper.loop import LoopOptions

        from .architectures.multimodal import text_only_record
        from .kv_cache_off import kv_cache_off
        from .looper_bridge import SourceLayerLoader, layer_modules, preflight, replacer_hooks
        from .mixed_precision.plan import plan_budget
        from .resources import check_run, wants_streaming
        from .spec_from_config import module_specs, quant_spec
        from .weight_only import with_mixture

        if self.results is not None:
            raise StateError("quantize: this model is already quantized; load the source again to re-run")
        if executor is not None and device is not None:
            raise DeviceError(
                f"device={device!r}: an executor runs the layers where its workers are; leave device unset"
            )
        run_device = resolve_device(device, argument="device")
        run_dtype = resolve_compute_dtype(compute_dtype, argument="compute_dtype")
        run_cache = resolve_device(cache_device, argument="cache_device")
        preflight(self.config, self.source)
        budget = plan_budget(self.config, self.source)  # refuses a bits_budget it cannot meet, before any work
        streaming = wants_streaming(self.source, keep_in_memory)
        if streaming and adapter(self.config) is not None:  # its verify wraps whole-model modules
            if keep_in_memory != AUTO:
                raise StateError("quantize: an EoRA adapter run keeps the model in memory; pass keep_in_memory=True")
            streaming = False
        spill = SpillArea.create(spill_dir) if streaming else None
        tokens = samples * length * (2 if calibration is None else 1) if needs_calibration(self.config) else 0
        check_run(
            self.source, self.config, tokens, streaming, spill.root if spill is not None else None,
            rotated=rotation(self.config) is not None,
        )  # fmt: skip
        rotated, wanted = None, rotation(self.config)
        if wanted is not None:  # verified on a float64 replica before any work
            from .rotation import prepare_rotation

            rotated = prepare_rotation(self.source, wanted)
        modules = layer_modules(self.source)
        self.config = with_mixture(self.config, modules, self.source.num_layers)  # q_k_m: -> dynamic
        start = time.perf_counter()
        config = self.config
        spec = quant_spec(config)
        cal = None
        calibration_seconds = 0.0
        stats = None
        if needs_calibration(config):
            from .calibration.run_input import calibration_input

            given = calibration_input(
                self.source, self.tokenizer, calibration,
                samples=samples, length=length, batch_size=batch_size, progress=progress,
            )  # fmt: skip
            self._calibration_source, self.calibration_record = given.source, given.record
            self._tokenizer_note = given.tokenizer_note or self._tokenizer_note
            cal = given.prepared
            stats = CalibrationStats(cal.rows, cal.total_tokens, cal.dropped)
            calibration_seconds = time.perf_counter() - start
        if rotated is not None and rotated.record.get("kind") == "learned":  # on the dense model's Grams
            from .rotation.learn import learn_residual

            self.source.materialize_base()
            with kv_cache_off(self.model):
                rotated = learn_residual(
                    self.source, rotated, cal, spec, format=str(config.format),
                    device=run_device if executor is None else None, cache_device=str(run_cache),
                )  # fmt: skip
        source_identity = None
        if rotated is not None:  # after the calibration rows: they are the unrotated run's
            from qlooper.identity import source_fingerprint

            from .rotation import install_rotation
            from .rotation.fold_source import rotation_identity

            install_rotation(self.source, rotated)
            self.rotation_record = rotated.record
        self.source.materialize_base()
        if rotated is not None:
            source_identity = rotation_identity(source_fingerprint(self.model), rotated.record)
        mixed: dict[str, Any] | None = None
        # The loop calls model(input_ids=, attention_mask=) and replays the captured kwargs; a KV cache
        # created there would be captured too and grow with every replay, so caching is off meanwhile.
        try:
            with kv_cache_off(self.model):
                if budget is not None and budget.needs_allocation:
                    # bits_budget -> dynamic rules, before the loop: the saved config carries them
                    if cal is None:
                        raise StateError(
                            "quantize: the bits_budget's sensitivity pass needs calibration rows; none made"
                        )
                    config, mixed = budget.resolve(
                        config, self.source, cal, spec, device=run_device if executor is None else None,
                        cache_device=str(run_cache),
                    )  # fmt: skip
                    self.config = config
                elif budget is not None:
                    mixed = budget.given
                names = [name for name, _ in modules]
                quant_method = method_of(config)
                processor = quant_method.processor(config, spec, module_specs(config, names))
                loader = SourceLayerLoader(self.source, spill)

                def adapter_for(name: str) -> Any:
                    return getattr(processor, "adapters", {}).get(name)

                replacer = kernel_replacer(
                    backend, dtype=self.source.dtype, **replacer_hooks(config, self.source.dtype, adapter_for)
                )
                options = LoopOptions(
                    true_sequential=quant_method.true_sequential(config),
                    lockstep=lockstep,
                    lockstep_budget=lockstep_budget,
                    pack_dtype=config.pack_dtype,
                    replace_module=loader.collect if streaming else replacer,
                    progress=progress,
                    executor=executor,
                    layer_loader=loader,
                    device=run_device if executor is None else None,
                    compute_dtype=run_dtype,
                    cache_device=str(run_cache),
                    source_identity=source_identity,
                )
                run = quantize_model(
                    self.model,
                    self.source.definition,
                    cal,
                    spec,
                    processor,
                    format=str(config.format),
                    checkpoint=checkpoint,
                    options=options,
                )
            loader.spill_rest(run.modules)  # layers a resumed run restored
        finally:
            self.source.materialize_base()  # released while the layers were quantized
            release_free_memory()
        self.spill, self._replacer = spill, replacer
        self.run = run
        multimodal = text_only_record(self.model)
        if multimodal is not None:
            logger.info("%s: %s", self.source.path, multimodal["note"])
        self.results = run.modules
        eora, variant = adapter(config), solver_variant(config)
        self.summary = QuantizeSummary(
            source=str(self.source.path),
            model_type=self.source.config.model_type,
            calibration_source=self._calibration_source,
            tokenizer_note=self._tokenizer_note,
            calibration=stats,
            calibration_seconds=round(calibration_seconds, 3) if stats is not None else None,
            method=algorithm(config),
            format=str(config.format),
            bits=config.width,
            group_size=config.group_size,
            sym=config.sym,
            modules=len(run.modules),
            fallbacks=tuple(r.module for r in run.report if r.fallback),
            resumed_from=run.resumed_from,
            quantize_seconds=round(time.perf_counter() - start - calibration_seconds, 3),
            largest_layer_bytes=loader.peak_layer_bytes,
            lockstep_skipped=dict(run.lockstep_skipped),
            adapter=({**eora, "modules": len(getattr(processor, "adapters", {}))} if eora is not None else None),
            # GPTAQ / FOEM: the GPTQ variant and its terms; GPTQ on AWQ-scaled weights: its processor's name
            algorithm=(
                {"name": variant[0], **variant[1]}
                if variant is not None
                else {"name": "awq_gptq"}
                if awq_scales(config)
                else None
            ),
            executor=executor.describe() if executor is not None else None,
            compute={
                "device": str(run_device) if executor is None else "where the executor runs",
                "compute_dtype": str(run_dtype).removeprefix("torch."),
                "cache_device": str(run_cache),
            },
            rotation=self.rotation_record,
            multimodal=multimodal,
            mixed_precision=mixed,
        )
        return self.summary

    def save(
        self,
        directory: str | Path,
        *,
        max_shard_size: int | str = "4GB",
        verify: bool = True,
        dtype: str | torch.dtype = "auto",
    ) -> QuantizeSummary:
        """Write the quantized checkpoint; with ``verify`` (default) reload and compare it (raises on a mismatch).
        Returns the run's :class:`~qhf.summary.QuantizeSummary` with ``dense_dtype``, ``saved`` and
        ``verification`` set (also kept as ``self.summary``).

        ``dtype``: of the dense (non-quantized) tensors and ``config.json``'s ``dtype``: ``"auto"`` (the
        source's: float16 for a ``.gguf``, the config's dtype for a Hugging Face directory), ``"float16"``,
        ``"bfloat16"`` or ``"float32"`` (:mod:`qhf.save.dense_dtype`). The in-memory model's dense tensors
        are rounded to that dtype first, so that it equals what was written.

        The files are written and verified in a staging directory and swapped in atomically only when
        the verification passed: a failed save or verification leaves ``directory`` as it was.

        After a streaming run (``quantize(keep_in_memory=False)``) the tensors are read from the spill area one
        at a time and written in the same order (the same bytes as the in-memory run); verify re-reads each
        module from the spill and runs both probe forwards one layer at a time (:mod:`qhf.verify`). A save
        whose estimated checkpoint bytes exceed the free disk at ``directory`` is refused before writing
        (:class:`~qhf.errors.InsufficientResourcesError`).
        """
        from .lora_adapter import round_adapters
        from .resources import check_save
        from .save.checkpoint import save_checkpoint, write_report
        from .save.dense_dtype import dtype_name, resolve_dense_dtype, round_to_dense_dtype
        from .verify import raise_on_failure, verify_checkpoint

        if self.results is None or self.run is None or self.summary is None:
            raise StateError("save: nothing to save yet; call quantize() first")
        results = self.results
        report = self.run.report
        start = time.perf_counter()
        directory = Path(directory)
        check_save(self.source, self.config, directory)
        dense_dtype = resolve_dense_dtype(self.source, dtype)
        quantized_weights = {f"{name}.weight" for name in self.results}
        dense_names = [n for n in self.source.tensor_names() if n not in quantized_weights]
        round_to_dense_dtype(self.model, dense_names, dense_dtype)
        adapters = round_adapters(self.model, dense_dtype)
        summary = replace(self.summary, dense_dtype=dtype_name(dense_dtype))
        self.summary = summary

        def verify_staged(staging: Path, shards: list[Path]) -> None:
            """Record the save, then (with ``verify``) reload the staged files and compare, before publishing."""
            saved = SavedCheckpoint(
                path=str(directory),
                shards=len(shards),
                bytes=sum(p.stat().st_size for p in shards),
                seconds=round(time.perf_counter() - start, 3),
            )
            if verify:
                verified = verify_checkpoint(
                    staging,
                    self.model,
                    results,
                    self.source.stored,
                    self.probe_ids(),
                    dtype=self.source.dtype,
                    spill=self.spill,
                    expected_logits=self._spilled_logits(dense_dtype),
                    layers_path=self.source.definition.layers_path,
                )
                self.summary = replace(summary, saved=saved, verification=verified.as_dict())
                write_report(staging, results, report, self.summary)
                raise_on_failure(verified, directory)
            else:
                self.summary = replace(summary, saved=saved, verification="skipped (verify=False)")
                write_report(staging, results, report, self.summary)

        save_checkpoint(
            directory,
            self.source,
            self.model,
            self.results,
            self.config,
            calibration=self.calibration_record,
            rotation=self.rotation_record,
            tokenizer=self.tokenizer,
            max_shard_size=max_shard_size,
            report=report,
            summary=self.summary,
            dense_dtype=dense_dtype,
            adapters=adapters,
            before_publish=verify_staged,
            spill=self.spill,
        )
        return self.summary

    def _spilled_logits(self, dense_dtype: torch.dtype) -> Any:
        """A streaming run's expected probe logits, ``ids -> [1, tokens, vocab]`` float32, computed one layer at a
        time from the spill (:func:`qhf.verify_streaming.spilled_logits`); None when the model is in memory."""
        spill, results = self.spill, self.results
        if spill is None or results is None:
            return None
        from .verify_streaming import spilled_logits

        source, replacer = self.source, self._replacer
        return lambda ids: spilled_logits(source, results, spill, replacer, dense_dtype, ids)

    def probe_ids(self, count: int = 48) -> list[int]:
        """A fixed probe input: the first ``count`` tokens of the evaluation slice (or fixed ids)."""
        if self.tokenizer is not None:
            return encode(self.tokenizer, bundled_docs("evaluation").texts[0])[:count]
        vocab = int(getattr(self.source.config, "vocab_size", 2))
        return [(7 * i + 3) % vocab for i in range(count)]

    def export_dense(self, directory: str | Path, *, dtype: torch.dtype = torch.float16) -> Path:
        """Dense export of the checkpoint this model last saved (see :func:`qhf.export.export_dense`)."""
        from .export import export_dense

        saved = self.summary.saved if self.summary is not None else None
        if saved is None:
            raise StateError("export_dense: nothing saved yet; call save() first (the export reads the checkpoint)")
        return export_dense(saved.path, directory, dtype=dtype)

    def perplexity(
        self, text: str | None = None, *, window: int = 512, max_windows: int | None = None, bos: bool | None = None
    ) -> PerplexityResult:
        """Perplexity of the in-memory model on ``text`` (default: the evaluation slice of the bundled docs);
        ``bos`` as in :func:`qhf.perplexity.evaluate` (None: BOS first exactly when the tokenizer prepends it).
        A streaming run (``keep_in_memory=False``) has no in-memory model: evaluate the saved checkpoint."""
        if self.spill is not None:
            raise StateError(
                "perplexity: this run streamed its layers to disk (keep_in_memory=False); save() it and evaluate "
                "qhf.load_quantized(directory), or quantize with keep_in_memory=True"
            )
        return evaluate(self.model, self.tokenizer, text, window=window, max_windows=max_windows, bos=bos)


def load(
    source: str | Path,
    quant_config: Any = None,
    *,
    tokenizer: Any = None,
    dtype: torch.dtype = torch.float32,
) -> QuantModel:
    """Open ``source`` lazily for quantization with ``quant_config`` (a dict in the reference's vocabulary, a
    ``qformats.config.QuantizeConfig`` or an object with ``to_dict()``; read by
    :func:`qhf.quant_config.read_quantize_config`, kept as ``QuantModel.config``).

    ``source``: a Hugging Face directory (single or sharded safetensors) or a llama ``.gguf`` file
    (decoded to a dense float32 baseline). ``tokenizer``: defaults to the source's own.
    """
    opened = open_source(source, dtype)
    config = read_quantize_config(quant_config)
    if tokenizer is None:
        tokenizer = load_tokenizer(opened.path) if opened.kind == "hf" else load_gguf_tokenizer(opened.path)
    return QuantModel(opened, config, tokenizer)
