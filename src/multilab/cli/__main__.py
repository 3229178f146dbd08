"""``python -m multilab.cli``: the same entry point as the ``multilab`` console script."""

import sys

from multilab.cli import main

sys.exit(main())
