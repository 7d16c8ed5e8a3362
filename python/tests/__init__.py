"""Tests of the fenceproxy Python client: unit tests, and tests against a real fenceproxy (harness.py)."""
