"""The Streamlit tuning app (``specobs dashboard``).

``data`` holds the inputs it was started with (a :class:`specobs.api.Inputs`), ``app`` lays out
the pages and asks one :class:`specobs.api.Session` per input for every answer, and ``views``
reshapes those answers into frames for the charts (:mod:`specobs.render.charts`) and tables.
Nothing here computes an estimate of its own.
"""
