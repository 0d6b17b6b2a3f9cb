"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import qhf


def test_version_matches_distribution() -> None:
    assert qhf.__version__ == version("qhf")
