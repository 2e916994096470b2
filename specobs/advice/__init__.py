"""What to run, from measured rows; typed values and enums only (every sentence is worded in
:mod:`specobs.render`).

- ``model``: the throughput model (acceptance per position × measured cost), fitted on
  ``step_blocks`` (consecutive steps of one configuration).
- ``recommend``: the best method and k per batch-size bucket, where to switch off, and why.
- ``band``: what an input without step timing can say about speed (a band, never a point).
- ``log_speedup``: speedups measured from what servers print (generation throughput at matched load).
- ``config_line``: the ``--speculative-config`` a recommendation prints (the drafter that ran).
- ``compare``: two runs compared: configuration, throughput and acceptance, with a verdict's facts.
- ``load``: where to draft under load, from a serving benchmark's measured crossover.
- ``report_builder``: the report's assembly (``ReportSums`` per part, then ``Report`` with its findings).
- ``report_findings``: the findings about serving, load and the input, and the ranking the summary uses.
- ``validate``: the model fitted on a few runs and checked on the others.
- ``paired``: the paired estimator both loops share.
"""
