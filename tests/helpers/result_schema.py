"""Validate what a command printed against the JSON Schemas in docs/schema/ (the result shape every JSON
answer about FlyDSL has, GEAK's gate schema, and the command's own; `doctor` and `cache list` have their own
alone)."""

from __future__ import annotations

import json
import os
from typing import Dict, List

import jsonschema
from referencing import Registry, Resource

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "docs", "schema")


def _schemas() -> Dict[str, Dict[str, object]]:
    found = {}
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".schema.json"):
            with open(os.path.join(SCHEMA_DIR, name)) as handle:
                found[name[: -len(".schema.json")]] = json.load(handle)
    return found


SCHEMAS = _schemas()
REGISTRY: Registry = Registry().with_resources(  # type: ignore[type-arg]
    [(str(s["$id"]), Resource.from_contents(s)) for s in SCHEMAS.values()])
VALIDATED: List[str] = []  # which commands' objects were validated (the suite checks every one is)


def validate(data: object, command: str) -> Dict[str, object]:
    """``data`` against the result schema, GEAK's gate schema and ``command``'s own schema; returns it."""
    for name in ("result", "geak_gate", command):
        schema = SCHEMAS[name]
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(data)
    VALIDATED.append(command)
    assert isinstance(data, dict)
    return data


def validate_own(data: object, command: str) -> Dict[str, object]:
    """``data`` against ``command``'s schema alone: a JSON answer that is no result object (``doctor``,
    ``cache list``, which say nothing about a tree being usable); returns it."""
    schema = SCHEMAS[command]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(data)
    VALIDATED.append(command)
    assert isinstance(data, dict)
    return data


def json_lines(text: str) -> List[Dict[str, object]]:
    """Every line of ``text`` parsed as a JSON object (stderr under --json carries nothing else)."""
    events = []
    for line in text.splitlines():
        event = json.loads(line)
        assert isinstance(event, dict) and "event" in event, line
        events.append(event)
    return events
