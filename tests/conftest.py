"""Shared by every test: nothing heavy here, so unit tests stay free of Ray, databases and networks."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST_HOME = REPO / ".raydag-test"
"""Test state (the embedded database's data, scratch homes) stays inside the project."""
