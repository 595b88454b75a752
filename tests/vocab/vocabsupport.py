"""Helpers shared by the tests in this folder (importable by a unique name; pytest loads
every folder's conftest.py as the same module name `conftest`)."""
import json
import os

import pytest

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def load_data(name: str):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)
