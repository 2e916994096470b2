"""Helpers shared by the tests (fixtures live in tests/conftest.py): paths, CLI runs, JSON
comparison, the import-rule checker, and the scenario scripts the real-vLLM tests run."""
