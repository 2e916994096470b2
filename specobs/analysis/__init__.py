"""Analysis: rows (or their sums) in, typed values out; no sentences, no I/O.

What the other rooms may use, by module (anything not named here, or starting with ``_``, is
the module's own):

- ``acceptance``: sums per cell (``cells``: one pass serves every ``--by``), ``summarize`` /
  ``summary_of`` (:class:`~specobs.records.Summary` per group), ``parse_by``, per-position
  rates, the iid check (``iid_alpha``, ``conditional_trend``), ``wasted_positions``,
  ``truncation``, ``with_context_bucket``.
- ``cost``: steady state and draining, timing per batch bucket (``timing_by_batch``,
  ``step_cells``), the k = 0 tax of a schedule (``schedule_tax``).
- ``intervals``: the one home of the interval estimators (Wilson, t, Welch–Satterthwaite,
  jackknife, ``mean_interval``).
- ``timeseries``: acceptance over time and its change points (``detect_changes``).
- ``breaks``: acceptance that broke against its own past, and the likely causes.
- ``findings``: what the numbers conclude, as typed findings (:class:`~specobs.records.Finding`).
- ``integrity``: where the numbers do not measure what the configuration says.
- ``per_request``: acceptance per request and requests far below their class.
- ``pitfalls``: the known pitfalls, as data.
- ``runs``: run metadata joined to rows or sums (``with_run_dimensions``).
- ``split``: by context length, or side by side by an environment dimension.
- ``sums``: sums per time bucket and label set (what the dashboard holds).
- ``under_load``: serving benchmarks: ratios at matched load, crossovers, goodput.

The formulas every room shares (acceptance length, tokens per step, per-position counts, cost
ratios) are in :mod:`specobs.formulas`, below this room.
"""
