"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import qalgos


def test_version_matches_distribution() -> None:
    assert qalgos.__version__ == version("qalgos")
