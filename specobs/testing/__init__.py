"""Helpers for testing against real engines (tiny local models)."""
