"""`python -m reslab ...` is the `reslab` command."""

import sys

from .cli import main

sys.exit(main())
