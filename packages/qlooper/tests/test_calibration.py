"""Calibration preparation: every accepted row shape, trimming, filtering, concatenation, sorting, batching."""

import pytest
import torch
from qlooper import CalibrationError, prepare_calibration


def tok(text: str) -> list[int]:
    return [ord(c) % 50 + 1 for c in text]


def test_mixed_rows_normalize_and_batch_with_padding() -> None:
    rows = [
        list(range(1, 13)),
        torch.arange(1, 16),
        torch.arange(1, 14)[None, :],
        {"input_ids": list(range(1, 20)), "attention_mask": [1] * 15 + [0] * 4},
        {"text": "hello calibration world"},
        "a plain string row here",
        {"messages": [{"role": "user", "content": "hi there friend"}]},
        [{"role": "user", "content": "another chat row"}],
    ]

    def template(messages: list[dict[str, str]]) -> str:
        return " ".join(f"<{m['role']}> {m['content']}" for m in messages)

    cal = prepare_calibration(rows, tokenizer=tok, chat_template=template, batch_size=3, sort="asc", min_length=10)
    lengths = [int(n) for b in cal.batches for n in b.attention_mask.sum(1)]
    assert lengths == sorted(lengths) and len(lengths) == 8
    assert 15 in lengths  # the masked dict row lost its 4 padded positions
    first = cal.batches[0]
    assert first.input_ids.dtype == torch.int64 and first.input_ids.shape[0] == 3
    # right padding: the mask is 1s then 0s, padded ids are pad_token_id (0)
    row = first.attention_mask[0]
    assert row.tolist() == sorted(row.tolist(), reverse=True)
    assert int(first.input_ids[first.attention_mask == 0].abs().sum()) == 0
    assert cal.total_tokens == sum(lengths)


def test_trim_keeps_start_or_end_and_min_length_drops() -> None:
    rows = [list(range(1, 31)), list(range(1, 6)), []]
    cal = prepare_calibration(rows, max_length=20, min_length=5)
    assert cal.batches[0].input_ids[0].tolist() == list(range(1, 21))
    assert cal.trimmed == 1 and cal.dropped == {"empty": 1, "length <= min_length=5": 1}
    left = prepare_calibration(rows[:1], max_length=20, padding_side="left")
    assert left.batches[0].input_ids[0].tolist() == list(range(11, 31))


def test_left_padding_puts_pads_first() -> None:
    cal = prepare_calibration([[5] * 12, [7] * 15], batch_size=2, padding_side="left", sort=None)
    assert cal.batches[0].attention_mask[0].tolist() == [0] * 3 + [1] * 12
    assert cal.batches[0].input_ids[0, :3].tolist() == [0, 0, 0]


def test_concatenation_with_separator_fills_blocks_and_pads_last() -> None:
    rows = [[1] * 11, [2] * 12, [3] * 13]
    cal = prepare_calibration(rows, concat_size=16, separator=[99], sort=None, batch_size=8, pad_token_id=-1)
    ids = cal.batches[0].input_ids
    stream = [1] * 11 + [99] + [2] * 12 + [99] + [3] * 13
    assert ids.shape == (3, 16)
    assert ids.flatten().tolist()[: len(stream)] == stream
    assert cal.batches[0].attention_mask.sum().item() == len(stream)
    assert ids[2, len(stream) - 32 :].tolist() == [-1] * (48 - len(stream))
    text_sep = prepare_calibration(rows, concat_size=16, separator="ab", tokenizer=tok, sort=None)
    assert text_sep.batches[0].input_ids[0, 11:13].tolist() == tok("ab")


def test_sort_orders_and_seeded_shuffle() -> None:
    rows = [[1] * n for n in (12, 20, 15, 30, 11)]
    desc = prepare_calibration(rows)
    assert [b.tokens for b in desc.batches] == [30, 20, 15, 12, 11]
    keep = prepare_calibration(rows, sort=None)
    assert [b.tokens for b in keep.batches] == [12, 20, 15, 30, 11]
    a = [b.tokens for b in prepare_calibration(rows, sort="shuffle", seed=3).batches]
    b = [b.tokens for b in prepare_calibration(rows, sort="shuffle", seed=3).batches]
    assert a == b and sorted(a) == [11, 12, 15, 20, 30]
    assert prepare_calibration(rows).fingerprint() != keep.fingerprint()


@pytest.mark.parametrize(
    ("data", "kwargs", "message"),
    [
        ("one string", {}, "single string is not a dataset"),
        ([], {}, "empty"),
        ({"input_ids": [1, 2]}, {}, "single dict"),
        ([[1, 2, 3]] * 4, {}, r"all 4 rows were dropped \(4 length <= min_length=10\)"),
        (["text row"], {}, "needs a tokenizer"),
        ([{"messages": [{"role": "u", "content": "x"}]}], {"tokenizer": tok}, "chat_template"),
        ([{"input_ids": [1] * 12, "attention_mask": [1] * 11}], {}, "11 entries, expected 12"),
        ([{"foo": 1}], {}, "needs 'input_ids', 'text' or 'messages'"),
        ([[1.5] * 12], {}, "integer token ids"),
        ([torch.ones(2, 2, 12, dtype=torch.long)], {}, "1-D token tensor"),
        ([[1] * 12], {"sort": "random"}, "sort"),
        ([[1] * 12], {"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_calibration_is_a_clear_error(data: object, kwargs: dict, message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        prepare_calibration(data, **kwargs)


def test_tensor_dataset_rows() -> None:
    cal = prepare_calibration(torch.arange(1, 49).view(2, 24), batch_size=2)
    assert cal.rows == 2 and cal.total_tokens == 48
