"""What ``pyproject.toml`` says of the project, for tests that compare with it: read with a pattern, as Python 3.10
(which the project supports) has no ``tomllib``."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def project_field(name: str) -> str:
    """The string value of ``name = "..."`` (or ``name = { text = "..." }``) in pyproject.toml's ``[project]``."""
    text = (REPO / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    found = re.search(rf'^{re.escape(name)} = (?:\{{ text = )?"([^"]*)"', project, re.M)
    assert found, f"pyproject.toml's [project] has no {name}"
    return found.group(1)
