"""`python -m gateway.ops.cli` (what the tests and the process supervisor run)."""

import sys

from gateway.ops.cli import main

sys.exit(main())
