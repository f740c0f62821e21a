"""LICENSE is the Apache License 2.0 that pyproject.toml names, word for word; CITATION.cff is Citation File Format
1.2.0 (its keys those of the format's schema) and cites the version pyproject.toml gives."""

import datetime
import hashlib
import re
from pathlib import Path

import yaml

from tests.project import project_field

REPO = Path(__file__).resolve().parents[1]
#: SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the license's standard text.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
#: The top-level keys of CFF 1.2.0 (its schema.json's ``properties``) and those it requires.
CFF_KEYS = {"abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi", "identifiers",
            "keywords", "license", "license-url", "message", "preferred-citation", "references", "repository",
            "repository-artifact", "repository-code", "title", "type", "url", "version"}
CFF_REQUIRED = {"authors", "cff-version", "message", "title"}
#: What the schema requires of each reference.
REFERENCE_REQUIRED = {"authors", "title", "type"}
#: A CFF date: YYYY-MM-DD.
DATE = re.compile(r"^[0-9]{4}-(0[1-9]|1[012])-(0[1-9]|[12][0-9]|3[01])$")


def test_the_license_is_apache_2_0_word_for_word():
    assert project_field("license") == "Apache-2.0"
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256


def test_citation_cff_is_cff_1_2_and_cites_this_version():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert CFF_REQUIRED <= set(citation) <= CFF_KEYS
    assert citation["version"] == project_field("version") and citation["license"] == project_field("license")
    released = citation["date-released"]  # YAML reads an unquoted YYYY-MM-DD as a date
    assert isinstance(released, datetime.date) and DATE.match(released.isoformat())
    assert citation["type"] in ("software", "dataset")
    assert all(isinstance(author, dict) and ("name" in author or "family-names" in author)
               for author in citation["authors"])
    for reference in citation.get("references", []):
        assert REFERENCE_REQUIRED <= set(reference), reference.get("title")
