"""The two loops that act on an engine: ``offline`` (``specobs tune``: race, choose, apply,
verify on a :class:`~specobs.loops.offline.Bench`, the real one in ``vllm_bench``) and
``online`` (the tuner the vLLM plugin drives step by step inside a serving engine); and
``sweep`` (``specobs sweep``: vLLM's serving benchmark against one real server per
configuration), with ``vllm_server`` (a vLLM API server as a child process) and ``bench_client`` (vLLM's own
benchmark client as a module); ``parallel``: the deployment's tensor, pipeline and data parallel
sizes, as both carry them to the engines and servers they start."""
