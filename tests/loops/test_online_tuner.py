"""The online tuner's decisions on an engine loop whose speed per k is known, its decision log
through the sinks, ingest and the exporter, and the engines it refuses.

The loop stands in for vLLM's scheduler only in the part the tuner touches: a dense
batch-size → k list read before every step (``scheduler.dynamic_sd_lookup``). The tuner in a
real engine is exercised in tests/test_vllm_online_tuner.py.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from specobs.capture.sinks import JsonlSink, MemorySink
from specobs.exporters.prometheus import PrometheusMetrics
from specobs.ingest import load
from specobs.ingest.decisions import parse
from specobs.loops.online import OnlineTuner, refusal
from specobs.records import TunerDecision, TunerReason, reason_of
from specobs.render.sentences import tuner_reason, tuner_rows, tuner_state

LARGEST = 16
#: A decision to vary: an apply at batch 1.
DECISION = TunerDecision(1.8e9, 1, 1, "apply", 2, 3, 0.1, 0.05, 0.15, None, TunerReason.FORCED, "r", 0)


def run_engine(tuner: OnlineTuner, table: list[int], rate, *, steps: int, batch: int = 1, seed: int = 0) -> list:
    """``steps`` engine steps at ``batch``: each reads k from ``table`` and runs at ``rate(k)`` tokens/s."""
    rng = random.Random(seed)
    ks = []
    for _ in range(steps):
        k = table[batch]
        ks.append(k)
        tokens = batch * 4
        seconds = tokens / (rate(k) * rng.uniform(0.95, 1.05))
        tuner.on_step(batch, k, tokens, seconds)
    return ks


def faster_at(best: int):
    return lambda k: 1000.0 * (1 - 0.1 * abs(k - best))


def test_explore_stays_within_its_share_and_restores_the_table():
    table = [2] * (LARGEST + 1)
    tuner = OnlineTuner("explore", table, 4, share=0.05, chunk_steps=8)
    ks = run_engine(tuner, table, faster_at(2), steps=2000)
    explored = [k for k in ks if k != 2]
    assert 0 < len(explored) <= 0.05 * len(ks)
    assert set(explored) == {1, 3}  # neighbours of the current k only
    assert tuner.exploration_share() <= 0.05
    pending = tuner.buckets[0].exploring  # the last step may have started one more exploring step
    assert table[1] == (2 if pending is None else pending)
    assert table[2:] == [2] * (LARGEST - 1)  # other buckets untouched
    run_engine(tuner, table, faster_at(2), steps=1)
    assert table[1] == 2 or tuner.buckets[0].exploring is not None
    assert not tuner.decisions  # explore never switches


def test_apply_switches_to_a_faster_k_and_confirms_it():
    table = [1] * (LARGEST + 1)
    tuner = OnlineTuner("apply", table, 4, share=0.1, chunk_steps=8)
    run_engine(tuner, table, faster_at(3), steps=6000)
    actions = [(d.action, d.from_k, d.to_k) for d in tuner.decisions]
    assert ("apply", 1, 2) in actions and ("confirm", 2, 2) in actions
    assert tuner.buckets[0].k == 3  # walked 1 → 2 → 3, the true best, and stayed
    assert table[1] == (tuner.buckets[0].exploring or 3)
    applied = [d for d in tuner.decisions if d.action == "apply"]
    assert all(d.predicted_low > 0.03 for d in applied)  # the interval cleared the margin
    assert all(table[b] == 1 for b in range(2, LARGEST + 1))  # other buckets untouched


def test_a_forced_bad_choice_is_rolled_back():
    table = [3] * (LARGEST + 1)
    tuner = OnlineTuner("apply", table, 4, share=0.0, chunk_steps=8)
    run_engine(tuner, table, faster_at(3), steps=100)  # measure the current k first
    tuner.switch(1, 0, "forced")
    assert table[1] == 0
    run_engine(tuner, table, faster_at(3), steps=100)
    rollback = [d for d in tuner.decisions if d.action == "rollback"]
    assert len(rollback) == 1 and rollback[0].to_k == 3 and rollback[0].measured_gain < -0.2
    assert table[1] == 3


def test_observe_never_touches_the_table_and_suggests_once():
    table = [1] * (LARGEST + 1)
    tuner = OnlineTuner("observe", table, 4, chunk_steps=8)
    run_engine(tuner, table, faster_at(1), steps=200)
    table[1] = 2  # an operator changes the table; the tuner measures the new k
    run_engine(tuner, table, faster_at(1), steps=200)
    table[1] = 1
    run_engine(tuner, table, faster_at(1), steps=400)
    assert table == [1] * (LARGEST + 1)
    assert not [d for d in tuner.decisions if d.action != "suggest"]


def test_decisions_go_to_their_own_files_and_back_through_ingest(tmp_path):
    table = [1] * (LARGEST + 1)
    tuner = OnlineTuner("apply", table, 4, share=0.1, chunk_steps=8, run_id="r1")
    run_engine(tuner, table, faster_at(3), steps=6000)
    rows = [d.to_row() for d in tuner.decisions]
    step = {"ts": 1.0, "engine": 0, "batch_size": 1, "num_spec_tokens": 2, "num_drafts": 1, "num_draft_tokens": 2,
            "num_accepted_tokens": 1, "num_generated_tokens": 2}  # fmt: skip
    sink = JsonlSink(tmp_path, "r1")
    sink.write([step, *rows, step | {"ts": 2.0}])
    sink.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and any("-tuner-" in f for f in files)
    (tmp_path / "specobs-r1-tuner-bad.jsonl").write_text(
        json.dumps(rows[0] | {"ts": rows[-1]["ts"] + 1}) + "\n" + json.dumps(rows[0] | {"tuner_action": "guess"}) + "\n"
    )
    ingested = load([str(tmp_path)])
    assert ingested.windows.collect().height == 2  # decisions are not steps
    assert len(ingested.decisions) == len(rows) + 1
    assert [d.action for d in ingested.decisions[: len(rows)]] == [r["tuner_action"] for r in rows]
    assert [(s.line, "tuner_action" in s.why) for s in ingested.skipped] == [(2, True)]
    memory = MemorySink()
    memory.write([step, *rows])
    assert len(memory.rows) == 1 and len(memory.decisions) == len(rows)


def test_the_exporter_counts_decisions_and_shows_the_live_k():
    metrics = PrometheusMetrics(CollectorRegistry())
    for row in (
        {"tuner_action": "apply", "batch_size_min": 1, "batch_size_max": 1, "to_k": 2},
        {"tuner_action": "apply", "batch_size_min": 4, "batch_size_max": 7, "to_k": 3},
        {"tuner_action": "rollback", "batch_size_min": 4, "batch_size_max": 7, "to_k": 1},
        {"tuner_action": "confirm", "batch_size_min": 1, "batch_size_max": 1, "to_k": 2},
        {"tuner_action": "bogus", "batch_size_min": 1, "batch_size_max": 1, "to_k": 9},
    ):
        metrics.observe_decision(row)
    value = metrics.registry.get_sample_value
    assert value("specobs_tuner_decisions_total", {"action": "apply"}) == 2
    assert value("specobs_tuner_decisions_total", {"action": "rollback"}) == 1
    assert value("specobs_tuner_num_speculative_tokens", {"batch_size_bucket": "1"}) == 2
    assert value("specobs_tuner_num_speculative_tokens", {"batch_size_bucket": "4-7"}) == 1


@pytest.mark.parametrize(
    ("scheduler", "env", "words"),
    [
        (SimpleNamespace(dynamic_sd_lookup=[1, 1], vllm_config=SimpleNamespace(
            parallel_config=SimpleNamespace(data_parallel_size=2))), {}, "data parallel > 1"),
        (SimpleNamespace(dynamic_sd_lookup=None, vllm_config=None), {}, "no batch-size schedule"),
        (SimpleNamespace(dynamic_sd_lookup=[1, 1], vllm_config=None), {"VLLM_USE_V2_MODEL_RUNNER": "1"},
         "Model Runner V2"),
        (SimpleNamespace(dynamic_sd_lookup=[1, 1], vllm_config=None), {}, None),
    ],
)  # fmt: skip
def test_engines_where_the_schedule_has_no_effect_are_refused(monkeypatch, scheduler, env, words):
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    reason = refusal(scheduler)
    if words is None:
        assert reason is None
    else:  # the decision log carries the reason typed; render words it
        assert reason is not None and words in tuner_reason(replace(DECISION, reason=reason))


def test_a_bad_mode_is_refused():
    with pytest.raises(ValueError, match="observe, explore, apply"):
        OnlineTuner("auto", [1, 1], 2)


def test_the_report_shows_the_decision_log(tmp_path):
    from support.helpers import run_cli

    table = [1] * (LARGEST + 1)
    tuner = OnlineTuner("apply", table, 4, share=0.1, chunk_steps=8, run_id="r1", clock=iter(range(10**6)).__next__)
    run_engine(tuner, table, faster_at(3), steps=6000)
    step = {"ts": 1.0, "engine": 0, "batch_size": 1, "num_spec_tokens": 2, "num_drafts": 1, "num_draft_tokens": 2,
            "num_accepted_tokens": 1, "num_generated_tokens": 2, "method": "ngram"}  # fmt: skip
    sink = JsonlSink(tmp_path, "r1")
    sink.write([step, *(d.to_row() for d in tuner.decisions)])
    sink.close()
    data = json.loads(run_cli("report", str(tmp_path), "-f", "json").stdout)
    assert [d["action"] for d in data["tuner_decisions"]] == [d.action for d in tuner.decisions]
    assert data["tuner_decisions"][0]["to_k"] == 2
    # Each reason: its code, and beside it the sentence render gives it.
    assert [(d["reason"], d["reason_words"]) for d in data["tuner_decisions"]] == [
        (str(d.reason), tuner_reason(d)) for d in tuner.decisions
    ]
    assert data["tuner_decisions"][0]["reason"] == "measured_faster"
    markdown = run_cli("report", str(tmp_path), "-f", "markdown").stdout.decode()
    assert "### Online tuner" in markdown
    assert "k=3 at batch 1 since 00:00:" in markdown and "measured after the switch" in markdown


def test_apply_decides_on_paired_blocks_under_a_load_that_comes_and_goes():
    """The machine runs 2× slower in alternate stretches of 40 steps, and a step's tokens come
    from the drafts of the step before (as in vLLM): the tuner still walks to the best k, each
    switch backed by exploring blocks paired with the steps just before them."""
    table = [1] * (LARGEST + 1)
    tuner = OnlineTuner("apply", table, 4, share=0.1, chunk_steps=8)
    rng = random.Random(5)
    drafted_by = table[1]
    for step in range(20000):
        k = table[1]
        slow = 2.0 if (step // 40) % 2 else 1.0
        tokens = 4
        seconds = tokens / (faster_at(3)(drafted_by) * rng.uniform(0.9, 1.1)) * slow
        tuner.on_step(1, k, tokens, seconds)
        drafted_by = k
    applied = [d for d in tuner.decisions if d.action == "apply"]
    assert applied and all(d.predicted_low > 0.03 for d in applied)
    assert tuner.buckets[0].k == 3
    assert tuner.paired_gain(tuner.buckets[0], 2) is not None  # the neighbours, measured in pairs


@pytest.mark.parametrize(
    ("reason", "measured", "words"),
    [
        (TunerReason.MEASURED_FASTER, None, "measured faster than the current k beyond noise"),
        (TunerReason.FORCED, None, "forced"),
        (TunerReason.NO_EARLIER_MEASUREMENT, None, "no earlier measurement to compare with"),
        (TunerReason.WINDOW_MEASURED, -0.034, "the window after the switch measured -3.4%"),
        (TunerReason.WINDOW_MEASURED, 0.12, "the window after the switch measured +12.0%"),
        (TunerReason.NO_SPECULATIVE_DECODING, None, "no speculative decoding in this engine"),
    ],
)
def test_a_typed_reason_is_worded_from_its_numbers_and_read_back(reason, measured, words):
    decision = replace(DECISION, reason=reason, measured_gain=measured)
    assert tuner_reason(decision) == words
    row = decision.to_row()
    assert row["reason"] == str(reason) and row["reason_text"] is None
    read, why = parse(json.loads(json.dumps(row)))
    assert why is None and read == decision


def test_a_decision_log_written_with_free_text_reasons_still_reads_and_says_them():
    old = {"tuner_action": "rollback", "ts": 1.8e9, "batch_size_min": 4, "batch_size_max": 7, "from_k": 3,
           "to_k": 1, "measured_gain": -0.05, "reason": "the window after the switch measured -5.0%",
           "run_id": "r", "engine": 0}  # fmt: skip
    read, why = parse(old)
    assert why is None and read is not None
    # One of the sentences older logs hold: read as the reason it said, worded the same again.
    assert read.reason == TunerReason.WINDOW_MEASURED and read.reason_text is None
    assert tuner_reason(read) == old["reason"]
    assert "rolled back (the window after the switch measured -5.0%)" in tuner_state([read])[0]
    assert tuner_rows([read])[0][-1] == old["reason"]
    again, _ = parse(json.loads(json.dumps(read.to_row())))  # saved again: still the same decision
    assert again == read
    # Text no release wrote is kept as it is.
    free, _ = parse({**old, "reason": "an operator rolled it back"})
    assert free is not None and free.reason == TunerReason.OTHER and free.reason_text == "an operator rolled it back"
    assert tuner_reason(free) == "an operator rolled it back"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("measured faster than the current k beyond noise", TunerReason.MEASURED_FASTER),
        ("no earlier measurement to compare with", TunerReason.NO_EARLIER_MEASUREMENT),
        ("the window after the switch measured +3.1%", TunerReason.WINDOW_MEASURED),
        ("no speculative decoding in this engine", TunerReason.NO_SPECULATIVE_DECODING),
        ("data parallel > 1: vLLM disables the batch-size schedule there", TunerReason.DATA_PARALLEL),
        ("Model Runner V2 is reported to ignore the batch-size schedule", TunerReason.MODEL_RUNNER_V2),
        (
            "the engine has no batch-size schedule: start it with num_speculative_tokens_per_batch_size in "
            "--speculative-config (e.g. [[1, MAX_NUM_SEQS, K]])",
            TunerReason.NO_SCHEDULE,
        ),
    ],
)
def test_every_sentence_older_logs_hold_reads_as_its_reason(text, reason):
    assert reason_of(text) == (reason, None)


def test_the_tuner_decides_with_typed_reasons():
    table = [3] * LARGEST
    tuner = OnlineTuner("apply", table, 4, chunk_steps=10)
    tuner.switch(1, 2)
    tuner.refuse("an operator said so")
    assert [(d.reason, d.reason_text) for d in tuner.decisions] == [
        (TunerReason.FORCED, None), (TunerReason.OTHER, "an operator said so"),
    ]  # fmt: skip
