"""`python -m gateway.cli` (what the tests and the process supervisor run)."""

import sys

from gateway.cli import main

sys.exit(main())
