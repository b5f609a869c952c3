"""`python -m hyperpod_dhc.hpdhc`: the same as the `hpdhc` console script."""

import sys

from hyperpod_dhc.hpdhc.cli import main

sys.exit(main())
