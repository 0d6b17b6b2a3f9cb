"""Cooperative stop: signals become a flag inside the block, and the previous handlers come back afterwards."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from qcheckpoint import CooperativeStopError, cooperative_stop


def test_sigint_and_sigterm_set_the_flag_and_handlers_are_restored() -> None:
    calls: list[int] = []

    def previous(signum: int, frame: object) -> None:
        calls.append(signum)

    old_int = signal.signal(signal.SIGINT, previous)
    old_term = signal.getsignal(signal.SIGTERM)
    try:
        with cooperative_stop() as stop:
            assert not stop.requested
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.requested and stop.signal_name == "SIGTERM"
            os.kill(os.getpid(), signal.SIGINT)  # does not raise KeyboardInterrupt, keeps the first name
            assert stop.signal_name == "SIGTERM" and calls == []
        assert signal.getsignal(signal.SIGINT) is previous
        assert signal.getsignal(signal.SIGTERM) == old_term
        os.kill(os.getpid(), signal.SIGINT)
        assert calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old_int)


def test_handlers_restored_when_the_block_raises() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError, match="boom"), cooperative_stop():
        raise RuntimeError("boom")
    assert signal.getsignal(signal.SIGINT) is before


def test_programmatic_request() -> None:
    with cooperative_stop() as stop:
        stop.request("budget")
        assert stop.requested and stop.signal_name == "budget"


def test_refused_off_the_main_thread() -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with cooperative_stop():
                pass
        except CooperativeStopError as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])
