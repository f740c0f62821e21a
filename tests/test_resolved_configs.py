"""Every config under ``*/configs`` (a base, or a row naming its base by ``config:``) and every command's default
resolves, through its command's own parser (``--print_config``), to the values of tests/fixtures/
resolved_configs.json: one line per config, the values each resolved to when every row was a whole file."""

import importlib
import json
from pathlib import Path

import pytest
import yaml

from tests.printed_config import printed_config

REPO = Path(__file__).resolve().parents[1]
EXPECTED = json.loads((REPO / "tests" / "fixtures" / "resolved_configs.json").read_text())
PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
#: The sections LightningCLI loads as one value: a row's nested ``model:`` would replace its base's whole section.
SECTIONS = ("trainer", "model", "data")


def configs() -> list[str]:
    return sorted(str(path.relative_to(REPO)) for package in PACKAGES
                  for path in (REPO / package / "configs").rglob("*.yaml"))


def test_every_config_has_its_expected_values():
    assert set(configs()) | {f"{package}:default" for package in PACKAGES} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_config_resolves_to_its_expected_values(name):
    package, _, default = name.partition(":")
    package = name.split("/")[0] if not default else package
    main = importlib.import_module(f"{package}.train").main
    resolved = printed_config(main, f"{package}.train", *([] if default else ["--config", str(REPO / name)]))
    resolved.pop("config", None)
    assert resolved == EXPECTED[name]


@pytest.mark.parametrize("name", [name for name in configs() if "config" in yaml.safe_load((REPO / name).read_text())])
def test_a_row_sets_section_values_by_dotted_keys(name):
    """jsonargparse applies a row's ``config:`` first, then its own keys; ``model.lr: 1e-4`` overrides one value of the
    base's model, where a nested ``model:`` mapping would replace the base's whole section by the class defaults."""
    row = yaml.safe_load((REPO / name).read_text())
    assert next(iter(row)) == "config" and not set(row) & set(SECTIONS), name
