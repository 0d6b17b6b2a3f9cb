"""``lowbit eval PATH``: perplexity over non-overlapping windows (``qhf.evaluate``) and a short generation.

The default text is qhf's evaluation slice of CPython's bundled documentation (disjoint from its
calibration slice); ``--text FILE`` evaluates a UTF-8 file instead. Every window starts with the tokenizer's
BOS token exactly when the tokenizer prepends one to text (Gemma 3: yes; SmolLM2: no); the perplexity line
says so and ``--json`` records it as ``bos``. A NaN or infinite perplexity fails
the command (exit 2, ``NonFiniteResultError``). The Python version is printed with
the default text because the bundled documentation differs between versions.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

from ..errors import NonFiniteResultError, UsageError
from .device_flags import flag_device
from .model_loading import backend_counts, generate_text, load_for_eval


def _read_text(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--text: {path!r} is not a file")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--text {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def run(args: argparse.Namespace) -> int:
    import qhf

    if args.max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens: expected 0 or more, found {args.max_new_tokens}")
    text = _read_text(args.text) if args.text is not None else None
    device = flag_device(args.device, "--device")
    start = time.perf_counter()
    loaded = load_for_eval(args.path, backend=args.backend, device=device)
    load_seconds = time.perf_counter() - start
    result = qhf.evaluate(loaded.model, loaded.tokenizer, text, window=args.window, max_windows=args.max_windows)
    if not math.isfinite(result.perplexity):
        raise NonFiniteResultError(
            f"{args.path}: perplexity is {result.perplexity} over {result.tokens} tokens; expected a finite value "
            f"(the model's logits hold NaN or Inf: check its weights with `lowbit inspect {args.path}`)"
        )
    generation = None
    if args.max_new_tokens > 0:
        generation = generate_text(loaded.model, loaded.tokenizer, args.prompt, args.max_new_tokens)
    text_name = args.text or f"bundled docs, evaluation slice (Python {platform.python_version()})"
    report = {
        "path": str(args.path),
        "kind": loaded.kind,
        "backends": backend_counts(loaded.backends),
        "device": str(device),
        "text": text_name,
        **result.as_dict(),
        "load_seconds": round(load_seconds, 2),
        "prompt": args.prompt if generation is not None else None,
        "generation": generation,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"model        {args.path} ({loaded.kind}; backends: {report['backends']})")
    print(f"text         {text_name}")
    print(
        f"perplexity   {result.perplexity:.3f} over {result.tokens} predicted tokens "
        f"({result.windows} windows of {result.window}{', each starting with BOS' if result.bos else ''}; "
        f"{result.seconds:.1f} s)"
    )
    if generation is not None:
        print(f"generation   {args.prompt!r} -> {generation!r}")
    return 0
