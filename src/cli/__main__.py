"""`python -m src.cli`: the `tgagent` command from a checkout."""

import sys

from src.cli import main

sys.exit(main())
