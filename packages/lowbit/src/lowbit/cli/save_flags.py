"""Checks of ``quantize``'s save flags made before any model is loaded (issue 36).

* ``--max-shard-size`` is parsed by qformats' own parser (``qformats.checkpoint.shard_size``) here, so a
  bad value fails in one line at the start instead of after the whole quantization.
* ``--format gptq`` / ``--format gptq_v2`` with 5, 6 or 7 bits is refused: those widths are stored only in
  the planar layout, and a run given an explicit format writes that format or fails, it does not quietly
  write another. Pass ``--format gptq_p`` (or no ``--format``: the default routes the width to it, and the
  plan line says so).
"""

from __future__ import annotations

import argparse

from ..errors import UsageError


def check_save_flags(args: argparse.Namespace) -> None:
    """Refuse a bad ``--max-shard-size`` and an explicit GPTQ format that cannot store ``--bits``."""
    from qformats.checkpoint.shard_size import parse_shard_size
    from qformats.config.resolve import PLANAR_ONLY_BITS
    from qformats.errors import ConfigError

    try:
        parse_shard_size(args.max_shard_size)
    except ConfigError as exc:
        raise UsageError(f"--max-shard-size: {exc}") from None
    fmt = getattr(args, "format", None)
    if fmt in ("gptq", "gptq_v2") and args.bits in PLANAR_ONLY_BITS:
        raise UsageError(
            f"--format {fmt} --bits {args.bits}: {fmt} stores 2, 3, 4 or 8 bits; {args.bits}-bit GPTQ is stored "
            "planar only: pass --format gptq_p (or omit --format, which routes it there)"
        )
