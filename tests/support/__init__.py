"""Helpers shared by unit and integration tests (importable because pytest puts tests/ on sys.path)."""
