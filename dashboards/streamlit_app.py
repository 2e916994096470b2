"""specobs tuning app, from a checkout: ``streamlit run dashboards/streamlit_app.py``.

Opens on the bundled vllm-cpu sweep; give other inputs in the sidebar, or start it with
``specobs dashboard PATHS [--prometheus URL]``. The app itself lives in ``specobs.dashboard``.
"""

from specobs.dashboard.app import main

main()
