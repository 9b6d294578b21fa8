"""``python -m hwrng``: the command line."""

from __future__ import annotations

import sys

from hwrng._cli import main

sys.exit(main())
