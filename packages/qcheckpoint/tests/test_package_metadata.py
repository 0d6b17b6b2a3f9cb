"""The installed distribution and the source agree on the version."""

from importlib.metadata import version

import qcheckpoint


def test_version_matches_distribution() -> None:
    assert qcheckpoint.__version__ == version("qcheckpoint")
