"""The default torch thread count without --threads: free cores now, at least 1, OMP_NUM_THREADS respected."""

import pytest
import torch
from lowbit.cli.main import main
from lowbit.cli.thread_default import default_threads, host_default_threads


@pytest.mark.parametrize(
    ("cores", "load", "expected"),
    [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 19.0, 1), (8, 2.2, 6), (1, 0.0, 1), (4, -1.0, 4)],
)
def test_default_threads_are_the_free_cores(cores: int, load: float, expected: int) -> None:
    assert default_threads(cores, load) == expected


def test_omp_num_threads_leaves_torch_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert host_default_threads() is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert host_default_threads() in range(1, len(__import__("os").sched_getaffinity(0)) + 1)


def test_cli_applies_the_default_and_the_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("lowbit.cli.main.host_default_threads", lambda: 1)
    try:
        torch.set_num_threads(2)
        main(["inspect", str(tmp_path)])  # fails on the empty folder, after the thread count is set
        assert torch.get_num_threads() == 1
        main(["--threads", "2", "inspect", str(tmp_path)])
        assert torch.get_num_threads() == 2
        torch.set_num_threads(2)
        main(["convert", str(tmp_path), "--to", "gptq", "--out", str(tmp_path) + "-out"])  # fails: empty folder
        assert torch.get_num_threads() == 2  # writes a checkpoint: torch's count, not the load's
    finally:
        torch.set_num_threads(before)
