"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import qlooper


def test_version_matches_distribution() -> None:
    assert qlooper.__version__ == version("qlooper")
