"""The upstream Go agent's config.json documents (tests/data/config/upstream-*.json: Azure/AKSFlexNode
v0.0.10's README examples and newer samples) and the client secret their service-principal
examples carry. Shared by the tests of upstream_config and of `config import`
(tests/unit/test_upstream_config.py, test_config_import.py,
tests/integration/test_config_import_cli.py)."""

import json
import os

DATA = os.path.join(os.path.dirname(__file__), "data", "config")
SECRET = "s3cr3t~value.from-the-portal"


def fixture_path(name):
    return os.path.join(DATA, name)


def document(name):
    with open(fixture_path(name)) as f:
        return json.load(f)
