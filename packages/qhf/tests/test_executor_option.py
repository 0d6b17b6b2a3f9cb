"""``quantize(executor=)``: a sharded executor (in-process shard workers, no Ray) on a lazily loaded tiny
llama gives the one-process result bit for bit, and the summary names the executor."""

from __future__ import annotations

import numpy as np
import qhf
from qhf.corpus import bundled_docs
from qhf.tokenizer import token_blocks
from qlooper.executor import LocalShardExecutor
from tiny_models import save_tiny_model


def test_sharded_executor_matches_one_process_on_lazy_layers(tmp_path, tokenizer) -> None:
    src = save_tiny_model(tmp_path / "m", "llama", tokenizer=tokenizer, num_hidden_layers=3)
    config = {"method": "gptq", "bits": 4, "group_size": 32}
    blocks = token_blocks(tokenizer, bundled_docs("calibration").texts, count=5, length=32)
    one = qhf.load(src, config)
    one.quantize(blocks, batch_size=1)
    sharded = qhf.load(src, config)
    executor = LocalShardExecutor(2)
    summary = sharded.quantize(blocks, batch_size=1, executor=executor)
    assert summary.executor is not None
    assert summary.executor["executor"] == "local-shards" and summary.executor["lost_workers"] == []
    assert len(summary.executor["layer_times"]) == 3
    assert one.results is not None and sharded.results is not None and sorted(one.results) == sorted(sharded.results)
    for name, mine in one.results.items():
        theirs = sharded.results[name]
        assert mine.packed is not None and theirs.packed is not None
        for key, value in mine.packed.items():
            assert np.array_equal(value, theirs.packed[key]), (name, key)
        assert one.run.report_for(name).loss == sharded.run.report_for(name).loss, name
