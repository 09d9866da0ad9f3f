"""Harnesses the tests drive in a short form and a person runs in a long one: the HTTP and MCP
fuzzers and the soak. Tests import them as `harness.X` (tests/ is the import root, as for conftest
and sqlcall); the long runs use the same root from the repository's top:

    PYTHONPATH=tests .venv/bin/python -m harness.soak --writers 12 --readers 4 --seconds 15
"""
