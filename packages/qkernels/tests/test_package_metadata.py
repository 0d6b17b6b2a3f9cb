"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import qkernels


def test_version_matches_distribution() -> None:
    assert qkernels.__version__ == version("qkernels")
