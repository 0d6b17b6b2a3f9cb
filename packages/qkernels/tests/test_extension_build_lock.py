"""The build folder's inter-process lock: a ``lock`` file left by a killed torch build is removed (it used to
make every later process wait forever); a live builder holding the lock is waited for, not raced."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from qkernels.cpu_extension import BATON, BUILD_LOCK, build_lock

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX; Windows keeps torch's baton only")


def test_a_baton_left_by_a_dead_build_is_removed_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / BATON).touch()  # what a build killed between torch creating and removing its baton leaves
    with caplog.at_level(logging.WARNING, logger="qkernels.cpu_extension"), build_lock(tmp_path):
        assert not (tmp_path / BATON).exists()
    assert "left by an extension build that did not finish" in caplog.text
    assert (tmp_path / BUILD_LOCK).exists()


def test_no_baton_means_nothing_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="qkernels.cpu_extension"), build_lock(tmp_path):
        pass
    assert caplog.text == ""


def test_a_live_builder_keeps_its_baton_until_it_releases_the_lock(tmp_path: Path) -> None:
    """Another process holds the lock (a build in progress, its baton present): we wait, and the baton we find
    afterwards is not removed from under it while it runs."""
    holder = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from qkernels.cpu_extension import BATON, build_lock
        folder = Path({str(tmp_path)!r})
        with build_lock(folder):
            (folder / BATON).touch()
            print("holding", flush=True)
            time.sleep(3)
            (folder / BATON).unlink()
            (folder / "built").touch()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        with build_lock(tmp_path):
            seen_baton = (tmp_path / BATON).exists()
            holder_built = (tmp_path / "built").exists()
        assert holder_built and not seen_baton  # we got the lock only after the holder's build finished
    finally:
        proc.wait(timeout=300)  # hang guard only
