"""`python -m hpdhc`: the same as the `hpdhc` console script."""

import sys

from hpdhc.cli import main

sys.exit(main())
