"""GPTQ 4-bit g128 pack/unpack speed: qformats vs a row-loop packer and numpy memcpy, side by side.

Plain script (no asserts on time). For each shape it measures, in the same run:

* ``memcpy``     -- ``np.copyto`` of the packed qweight's bytes (the physical floor);
* ``row-loop``   -- a reference-style packer that loops over qweight rows with whole-row numpy ops
                    (the shape of the classic "original" GPTQ packer), 4096x4096 only;
* ``qformats``   -- ``get_layout("gptq_v2").pack`` / ``.unpack`` (qweight + qzeros + scales + g_idx).

Times are the best (minimum) wall-clock seconds of repeated runs -- the machine is shared, so the
minimum is the least disturbed sample -- plus the process CPU seconds of that same sample. Ratios
are against memcpy and the row-loop packer measured in the same run. The issue's reference point is
0.146 s for the best peer packer on 4096x4096 (printed for context).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx

BITS, GROUP = 4, 128
PEER_SECONDS = 0.146


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(best wall seconds, CPU seconds of that run) over ``repeat`` runs after a warm-up."""
    fn()
    samples = []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(samples)


def row_loop_pack(codes: np.ndarray) -> np.ndarray:
    """qweight [in/8, out] built one qweight row at a time (8 shifted whole-row ORs per row)."""
    intweight = np.ascontiguousarray(codes.T).astype(np.uint32)
    per = 32 // BITS
    qweight = np.zeros((intweight.shape[0] // per, intweight.shape[1]), dtype=np.uint32)
    for row in range(qweight.shape[0]):
        for j in range(per):
            qweight[row] |= intweight[row * per + j] << np.uint32(BITS * j)
    return qweight.view(np.int32)


def make(out: int, in_: int) -> QuantizedWeight:
    rng = np.random.default_rng(0)
    groups = in_ // GROUP
    return QuantizedWeight(
        rng.integers(0, 1 << BITS, (out, in_), dtype=np.uint8),
        rng.random((groups, out), dtype=np.float32).astype(np.float16),
        rng.integers(0, 1 << BITS, (groups, out)).astype(np.int32),
        default_g_idx(in_, GROUP),
        BITS,
        GROUP,
        False,
    )


def main() -> None:
    layout = get_layout("gptq_v2")
    rows = []
    for out, in_ in ((4096, 4096), (11008, 4096)):
        weight = make(out, in_)
        tensors = layout.pack(weight)
        meta = LayoutMeta(BITS, GROUP, in_, out, False)
        assert layout.unpack(tensors, meta).equals(weight)  # correctness, not timing
        src = tensors["qweight"]
        dst = np.empty_like(src)
        memcpy = timed(lambda src=src, dst=dst: np.copyto(dst, src), 20)
        pack = timed(lambda w=weight: layout.pack(w), 7)
        unpack = timed(lambda t=tensors, m=meta: layout.unpack(t, m), 7)
        loop = None
        if out == 4096:
            np.testing.assert_array_equal(row_loop_pack(weight.codes), src)
            loop = timed(lambda c=weight.codes: row_loop_pack(c), 3)
        rows.append((f"{out}x{in_}", "memcpy", memcpy, loop))
        rows.append((f"{out}x{in_}", "pack", pack, loop))
        rows.append((f"{out}x{in_}", "unpack", unpack, loop))
    print(f"GPTQ v2 {BITS}-bit g{GROUP}, int32 words; best-of-N wall seconds and that run's CPU seconds")
    header = f"{'shape':<11} {'op':<7} {'wall s':>8} {'cpu s':>8} {'x memcpy':>9} {'row-loop s':>11} {'speedup':>8}"
    print(header + f" {'vs 0.146s':>10}")
    for shape, op, (wall, cpu), loop in rows:
        base = next(s[0] for sh, o, s, _ in rows if sh == shape and o == "memcpy")
        loop_text = f"{loop[0]:.4f}" if loop is not None else "-"
        speed = f"{loop[0] / wall:.1f}x" if loop is not None and op != "memcpy" else "-"
        peer = f"{PEER_SECONDS / wall:.1f}x" if shape == "4096x4096" and op != "memcpy" else "-"
        print(
            f"{shape:<11} {op:<7} {wall:>8.4f} {cpu:>8.4f} {wall / base:>8.1f}x {loop_text:>11} {speed:>8} {peer:>10}"
        )


if __name__ == "__main__":
    main()
