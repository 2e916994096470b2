"""vLLM capture: the hooks (``hooks``), the run metadata read from an engine (``metadata``), its
speculative config seen from specobs (``speculative``), the capture-only ``instrument_engine``
and the stat logger. Importing this package does not import vLLM. The public entry, wired to the
exporters and the online tuner, is :mod:`specobs.vllm`."""
