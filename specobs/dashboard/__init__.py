"""The Streamlit tuning app (``specobs dashboard``).

``data`` reads the inputs and applies the filters, ``views`` reshapes the package's analysis
and tuning results into frames for charts and tables, ``charts`` draws them with Altair, and
``app`` lays out the pages. Every number comes from ``specobs.analysis`` and
``specobs.advice``; nothing here computes an estimate of its own.
"""
