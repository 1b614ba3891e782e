"""`python -m reslab.cli ...` is the `reslab` command (as `python -m reslab ...` is)."""

import sys

from .root import main

sys.exit(main())
