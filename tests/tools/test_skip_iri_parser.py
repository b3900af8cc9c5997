"""tools/skip_iri_parser.py: the test processes load no rfc3987_syntax, and lose no check."""

import json
import sys
from pathlib import Path

import nbformat


def test_the_test_process_did_without_the_iri_parser():
    assert sys.modules.get("rfc3987_syntax", None) is None
    assert "nbformat" in sys.modules  # imported (by nbval) after the plugin: the plugin was first


def formats(schema) -> set[str]:
    """Every value of a "format" keyword in a JSON schema (not a property named "format")."""
    found = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "format" and isinstance(value, str):
                found.add(value)
            elif key == "properties" and isinstance(value, dict):
                for prop in value.values():
                    found |= formats(prop)
            else:
                found |= formats(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= formats(item)
    return found


def test_no_notebook_schema_uses_an_iri_format():
    schemas = sorted(Path(nbformat.__file__).parent.glob("v*/nbformat.v*.schema.json"))
    assert len(schemas) >= 7, schemas  # v3 and v4.0 to v4.5
    used = set().union(*(formats(json.loads(path.read_text())) for path in schemas))
    assert not used & {"iri", "iri-reference"}, used


def test_formats_finds_a_format_keyword_and_skips_a_property_named_format():
    schema = {
        "properties": {"format": {"type": "string"}, "url": {"type": "string", "format": "iri"}}
    }
    assert formats(schema) == {"iri"}
