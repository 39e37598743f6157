"""What the tests share: fixtures (``support.fixtures``, loaded by tests/conftest.py), helpers
for queues, Spark streams and sinks, the node-fault harness and the docs' code blocks.

A test module imports from here, never from another test module (tests/unit/test_test_imports.py
fails on that): a helper two test files need lives here under a public name.
"""
