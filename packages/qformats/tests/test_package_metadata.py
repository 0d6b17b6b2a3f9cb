"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import qformats


def test_version_matches_distribution() -> None:
    assert qformats.__version__ == version("qformats")
