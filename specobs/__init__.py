"""specobs: make speculative decoding in LLM serving measurable and tunable."""

__version__ = "0.1.0"

__all__ = ["__version__"]
