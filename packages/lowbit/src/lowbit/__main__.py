"""``python -m lowbit``: the same as the ``lowbit`` console script."""

import sys

from .cli.main import main

sys.exit(main())
