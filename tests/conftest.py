"""Shared by every test: nothing heavy here, so unit tests stay free of Ray, databases and networks."""

from pathlib import Path

from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent
TEST_HOME = REPO / ".raydag-test"
"""Test state (the embedded database's data, scratch homes) stays inside the project."""

# No property test has a deadline: Hypothesis's default (200 ms an example) is a timing assertion, and on a
# loaded shared machine it failed a correct example of test_nests_deeper_than_agrees_with_unfit_values_on_depth.
settings.register_profile("raydag", deadline=None)
settings.load_profile("raydag")
