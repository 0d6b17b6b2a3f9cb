"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import lowbit


def test_version_matches_distribution() -> None:
    assert lowbit.__version__ == version("lowbit")
