"""Bad command-line input ends in one line and exit status 2 (argparse's status for usage errors), no traceback."""

from __future__ import annotations

import sys
from typing import NoReturn


def usage_error(message: str) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)
