"""What to run, from measured rows: the throughput model, the recommendation, the comparison of
two runs, the report's assembly, and the estimators the loops share (``paired``). Typed values
and enums only; every sentence is worded in :mod:`specobs.render`."""
