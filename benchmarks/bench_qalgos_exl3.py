"""qalgos EXL3: trellis search speed and quality, its tail-biting exactness, and per-module weighted error.

Three measurements (docs/algorithms.md, "EXL3: trellis codes on the CPU"), process CPU seconds, 1 thread:

* ``speed``: tiles per CPU second and relative MSE of ``search_tiles`` on Gaussian tiles (0.9 x the codebook
  RMS) for the full two-pass search and the reduced ``window`` searches.
* ``exact``: the exact tail-biting optimum (one constrained Viterbi per overlap: 4096 at 4 bits, 16384 at 2)
  beside the two-pass code and its lower bound, for a few tiles.
* ``modules``: one decoder layer's modules of a Hugging Face model directory: the Hessian ``2/N XᵀX`` of each
  module's inputs over calibration rows (a JSON ``{"calibration": [[token ids], ...]}``), then the relative
  weighted error ``tr(dW H dWᵀ) / tr(W H Wᵀ)`` of EXL3, lowbit GPTQ g128 and RTN g128 at each width.

    python benchmarks/bench_qalgos_exl3.py speed [--bits 2,3,4] [--tiles 32]
    python benchmarks/bench_qalgos_exl3.py exact [--bits 4] [--tiles 3]
    python benchmarks/bench_qalgos_exl3.py modules --model DIR --inputs JSON [--rows 16] [--layer 0]
        [--modules self_attn.q_proj,self_attn.k_proj] [--bits 2,3,4]

Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from qalgos.exl3 import quantize_exl3
from qalgos.exl3_trellis_search import search_tiles, viterbi
from qalgos.gptq import GPTQ
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qformats.layouts.exl3.trellis import codebook_values


def gaussian_tiles(tiles: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``3inst`` values and ``[tiles, 256]`` Gaussian targets at 0.9 x the codebook RMS."""
    values = torch.from_numpy(codebook_values("3inst"))
    gen = torch.Generator().manual_seed(seed)
    rms = float(values.double().square().mean().sqrt())
    return values, torch.randn(tiles, 256, generator=gen) * 0.9 * rms


def speed(bits_list: list[int], tiles: int) -> None:
    values, x = gaussian_tiles(tiles, 3)
    for bits in bits_list:
        for window in (None, 32, 16):
            start = time.process_time()
            found = search_tiles(x, values, bits, window=window)
            seconds = time.process_time() - start
            mse = float(found.cost.sum() / x.double().square().sum())
            print(f"bits {bits} window {window}: {tiles / seconds:.1f} tiles / CPU s, relative MSE {mse:.5f}")


def exact(bits_list: list[int], tiles: int) -> None:
    values, x = gaussian_tiles(tiles, 11)
    for bits in bits_list:
        found = search_tiles(x, values, bits)
        overlaps = 1 << (16 - bits)
        batch = 64 if bits >= 4 else 16
        workspace = torch.empty(batch * 256 * (1 << (16 - bits)))
        for t in range(tiles):
            best = float("inf")
            for c0 in range(0, overlaps, batch):
                c = torch.arange(c0, min(overlaps, c0 + batch))
                _, cost = viterbi(x[t : t + 1].expand(len(c), -1).contiguous(), values, bits, c, workspace=workspace)
                best = min(best, float(cost.min()))
            two_pass = float(found.cost[t])
            print(
                f"bits {bits} tile {t}: bound {float(found.bound[t]):.5f} exact {best:.5f} two-pass {two_pass:.5f} "
                f"(+{(two_pass - best) / best:.2%})"
            )


def modules(args: argparse.Namespace) -> None:
    from transformers import AutoModelForCausalLM

    with open(args.inputs) as handle:
        rows = json.load(handle)["calibration"][: args.rows]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    layer = model.model.layers[args.layer]
    names = args.modules.split(",")
    grams: dict[str, torch.Tensor] = {}
    tokens: dict[str, int] = {}

    def hook(name: str):  # type: ignore[no-untyped-def]
        def record(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()
            grams[name] = grams[name] + x.T @ x if name in grams else x.T @ x
            tokens[name] = tokens.get(name, 0) + x.shape[0]

        return record

    handles = [layer.get_submodule(n).register_forward_pre_hook(hook(n)) for n in names]
    with torch.no_grad():
        for row in rows:
            model(torch.tensor([row]))
    for handle in handles:
        handle.remove()

    def weighted(q: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> float:
        d = q.double() - w.double()
        return float(torch.einsum("oi,ij,oj->", d, h, d))

    for bits in (int(b) for b in args.bits.split(",")):
        for name in names:
            w = layer.get_submodule(name).weight.detach().float()
            h = 2 * grams[name] / tokens[name]
            base = weighted(torch.zeros_like(w), w, h)
            spec = QuantSpec(bits=bits, group_size=128)
            gptq = GPTQ.from_hessian(h.float(), tokens[name], spec).quantize(w)
            rtn = quantize_rtn(w, spec)
            start = time.process_time()
            result = quantize_exl3(w, h, bits)
            seconds = time.process_time() - start
            record = {
                "module": name,
                "shape": list(w.shape),
                "bits": bits,
                "exl3": weighted(result.dequantized, w, h) / base,
                "gptq_g128": weighted(gptq.dequantized, w, h) / base,
                "rtn_g128": weighted(rtn.dequantized, w, h) / base,
                "tiles_per_cpu_s": w.numel() / 256 / seconds,
            }
            print(json.dumps(record), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("speed", "exact", "modules"))
    parser.add_argument("--bits", default="2,3,4")
    parser.add_argument("--tiles", type=int, default=32)
    parser.add_argument("--model")
    parser.add_argument("--inputs")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--modules", default="self_attn.q_proj,self_attn.k_proj,self_attn.v_proj,self_attn.o_proj")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bits_list = [int(b) for b in args.bits.split(",")]
    if args.what == "speed":
        speed(bits_list, args.tiles)
    elif args.what == "exact":
        exact(bits_list, args.tiles)
    else:
        if not args.model or not args.inputs:
            parser.error("modules needs --model DIR and --inputs JSON")
        modules(args)


if __name__ == "__main__":
    main()
