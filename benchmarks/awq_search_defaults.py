"""``AWQProcessor``'s search-cost keyword defaults swapped for a block (the processor registry builds the
processor from the spec alone), so a benchmark can time the full search beside the defaults."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import qlooper.processors.awq as awq_proc


@contextlib.contextmanager
def processor_defaults(search_tokens: int | None, gram_loss: bool) -> Iterator[None]:
    """Within the block, ``AWQProcessor(spec)`` searches with ``search_tokens`` and ``gram_loss``."""
    defaults = awq_proc.AWQProcessor.__init__.__kwdefaults__
    saved = dict(defaults)
    defaults.update(search_tokens=search_tokens, gram_loss=gram_loss)
    try:
        yield
    finally:
        defaults.clear()
        defaults.update(saved)
