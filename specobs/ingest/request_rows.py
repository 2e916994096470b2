"""Finished-request rows (``requests``) from the capture, a vLLM server's responses, or saved offline outputs.

Three JSON inputs, each one record per line or saved indented (JSON documents one after
another, or a list; gzip allowed), all giving the ``requests`` columns of
:data:`specobs.schema.REQUESTS` (docs/formats.md):

- ``requests-jsonl``: the capture's own files (``SPECOBS_REQUESTS``;
  ``specobs-<run>-requests-p<pid>-<n>.jsonl``), already in those columns;
- ``openai-responses``: responses of a vLLM server started with
  ``--per-request-spec-decode-metrics summary|detailed``, one response JSON per line (a
  ``data: `` prefix, as in a saved event stream, is allowed). The numbers are under
  ``metrics.speculative_decoding``; a stream carries them only on its final usage chunk, so
  chunks without them are passed over (and counted in one notice), as is ``data: [DONE]``;
- ``vllm-outputs``: offline ``RequestOutput``\\ s saved as dicts (:func:`offline_record`)::

      {"request_id": "7", "num_prompt_tokens": 12, "workload": "chat",
       "outputs": [{"index": 0, "num_output_tokens": 48, "finish_reason": "length",
                    "spec_decode_metrics": {"acceptance_histogram": [3, 5, 9, 12], ...}}]}

  → one row per output, ``request_key = request_key("7")`` (output i > 0: ``"7:i"``),
  ``num_spec_steps = 29``, ``num_accepted_tokens = 0·3 + 1·5 + 2·9 + 3·12 = 59``.

Request ids are hashed on the way in (:func:`specobs.schema.request_key`); prompt and output
text, when a record has it, is never read. A record counts only when its numbers agree (the
histogram sums to the steps, accepted ≤ drafted, per-step lists match the totals, a printed
mean acceptance length matches the counts); otherwise it is skipped whole as ``FILE:LINE: why``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from specobs import schema, validity
from specobs.errors import Notice, Skipped
from specobs.formulas import acceptance_length
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, read_whole
from specobs.records import SourceReport

FORMAT_CAPTURE = "requests-jsonl"
FORMAT_OPENAI = "openai-responses"
FORMAT_OFFLINE = "vllm-outputs"
FORMATS = (FORMAT_CAPTURE, FORMAT_OPENAI, FORMAT_OFFLINE)

_OPENAI_OBJECTS = (b'"text_completion"', b'"chat.completion"', b'"chat.completion.chunk"')


def looks_like_requests(head: bytes) -> str | None:
    """The request format of a file from its first non-empty line (which may be cut off), or
    from its first bytes when it is one JSON document over several lines (a response saved
    pretty-printed, a list of them), else None."""
    for raw in head.split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(b"data:"):
            line = line[5:].lstrip()
        if not line.startswith((b"{", b"[")):
            return None
        if _document_starts(line):
            line = head
        if b'"request_key"' in line and b'"num_spec_steps"' in line:
            return FORMAT_CAPTURE
        if b'"request_id"' in line and b'"outputs"' in line:
            return FORMAT_OFFLINE
        if b'"speculative_decoding"' in line or (b'"object"' in line and any(o in line for o in _OPENAI_OBJECTS)):
            return FORMAT_OPENAI
        return None
    return None


def _document_starts(line: bytes) -> bool:
    """Whether a first line opens JSON documents rather than one record per line: ``{`` alone
    (as ``json.dump(..., indent=2)`` writes an object) or a list (records are objects)."""
    return line == b"{" or line.startswith(b"[")


def _records(data: bytes) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """``(line, value)`` of every record of ``data`` — one JSON value per line (JSON Lines, a
    saved stream's ``data: `` lines), or, when the first line opens a document over several
    lines, each value of the concatenated documents (a list's elements each) — and ``(line,
    why)`` for what does not parse. Records of a document are numbered by their first line."""
    records: list[tuple[int, Any]] = []
    bad: list[tuple[int, str]] = []
    first = next((raw.strip() for raw in data.split(b"\n") if raw.strip()), b"")
    if not _document_starts(first):
        for number, raw in enumerate(data.split(b"\n"), start=1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith(b"data:"):
                line = line[5:].strip()
                if line == b"[DONE]":
                    continue
            try:
                records.append((number, json.loads(line)))
            except (ValueError, RecursionError):
                bad.append((number, "not valid JSON"))
        return records, bad
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    at, number = 0, 1
    while True:
        start = len(text) - len(text[at:].lstrip())
        number += text.count("\n", at, start)
        at = start
        if at >= len(text):
            return records, bad
        try:
            value, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError) as exc:
            detail = f" ({exc.msg} at line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
            bad.append((number, f"not valid JSON{detail}: the rest of the document is not read"))
            return records, bad
        if isinstance(value, list):  # a list of responses: each element is a record
            records += [(number, item) for item in value]
        else:
            records.append((number, value))
        number += text.count("\n", at, end)
        at = end


def offline_record(output: Any, **labels: Any) -> dict[str, Any]:
    """A vLLM ``RequestOutput`` as the ``vllm-outputs`` record (no prompt or output text).

    ``labels`` (``workload="chat"``, ``model=…``) are added to the record; save one per line::

        with open("outputs.jsonl", "w") as f:
            for out in llm.generate(prompts, params):
                f.write(json.dumps(offline_record(out, workload="chat")) + "\\n")
    """
    prompt = getattr(output, "prompt_token_ids", None)
    outputs: list[dict[str, Any]] = []
    for completion in getattr(output, "outputs", None) or []:
        metrics = getattr(completion, "spec_decode_metrics", None)
        reason = getattr(completion, "finish_reason", None)
        outputs.append(
            {
                "index": getattr(completion, "index", len(outputs)),
                "num_output_tokens": len(getattr(completion, "token_ids", None) or ()),
                "finish_reason": None if reason is None else str(reason),
                "spec_decode_metrics": metrics.to_dict() if metrics is not None else None,
            }
        )
    record: dict[str, Any] = {
        "request_id": str(output.request_id),
        "num_prompt_tokens": len(prompt) if prompt is not None else None,
        "outputs": outputs,
    }
    record.update({k: v for k, v in labels.items() if k in schema.LABELS})
    return record


# --- checks ---------------------------------------------------------------------------------------


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _counts(value: Any) -> bool:
    return isinstance(value, list) and all(_count(v) for v in value)


def request_problem(row: Mapping[str, Any]) -> str | None:
    """Why a row's acceptance numbers cannot be counted, or None when they agree."""
    ts = row.get("ts")
    if ts is not None and (not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts)):
        return "ts is not a number"
    histogram = row.get("acceptance_histogram")
    if not _counts(histogram) or not histogram:
        return "acceptance_histogram is not a non-empty list of non-negative integers"
    for name in ("num_spec_steps", "num_draft_tokens", "num_accepted_tokens"):
        if not _count(row.get(name)):
            return f"{name} is not a non-negative integer"
    for name in ("num_prompt_tokens", "num_output_tokens", "num_spec_tokens"):
        if row.get(name) is not None and not _count(row[name]):
            return f"{name} is not a non-negative integer"
    steps, drafted, accepted = row["num_spec_steps"], row["num_draft_tokens"], row["num_accepted_tokens"]
    if sum(histogram) != steps:
        return f"acceptance_histogram sums to {sum(histogram)}, not num_spec_steps {steps}"
    weighted = sum(i * n for i, n in enumerate(histogram))
    if weighted != accepted:
        return f"acceptance_histogram gives {weighted} accepted tokens, not {accepted}"
    k = row.get("num_spec_tokens")
    contradiction = validity.request_contradiction(accepted, drafted, steps, k or None)
    if contradiction is not None:
        return contradiction
    if k is not None and len(histogram) > k + 1:
        return f"acceptance_histogram has {len(histogram)} elements, more than num_spec_tokens + 1 = {k + 1}"
    per_drafted: Any = row.get("per_step_drafted")
    per_accepted: Any = row.get("per_step_accepted")
    if (per_drafted is None) != (per_accepted is None):
        return "per_step_drafted and per_step_accepted come together"
    if per_drafted is not None:
        if not _counts(per_drafted) or not _counts(per_accepted):
            return "per_step lists are not lists of non-negative integers"
        if len(per_drafted) != steps or len(per_accepted) != steps:
            return f"per_step lists have {len(per_drafted)} and {len(per_accepted)} steps, not {steps}"
        if sum(per_drafted) != drafted or sum(per_accepted) != accepted:
            return "per_step lists do not add up to num_draft_tokens and num_accepted_tokens"
    mean = row.get("mean_acceptance_length")
    if mean is not None:
        if not isinstance(mean, int | float) or isinstance(mean, bool) or not math.isfinite(mean):
            return "mean_acceptance_length is not a number"
        expected = acceptance_length(accepted, steps) if steps else 1.0
        if abs(mean - expected) > 1e-9 * max(1.0, expected):
            return f"mean_acceptance_length {mean} is not 1 + accepted/steps = {expected}"
    return None


def vllm_request_columns(metrics: Any) -> dict[str, Any] | str:
    """vLLM's ``RequestSpecDecodeMetrics.to_dict()`` (or the response's ``speculative_decoding``) → columns."""
    if not isinstance(metrics, dict):
        return "the speculative decoding metrics are not an object"
    return {
        "num_spec_tokens": metrics.get("num_spec_tokens"),
        "num_spec_steps": metrics.get("num_spec_steps"),
        "num_draft_tokens": metrics.get("num_draft_tokens"),
        "num_accepted_tokens": metrics.get("num_accepted_draft_tokens"),
        "acceptance_histogram": metrics.get("acceptance_histogram"),
        "per_step_drafted": metrics.get("per_step_drafted"),
        "per_step_accepted": metrics.get("per_step_accepted"),
        "mean_acceptance_length": metrics.get("mean_acceptance_length"),
    }


def _labels(record: Mapping[str, Any]) -> dict[str, Any] | str:
    out: dict[str, Any] = {}
    for name in schema.LABELS:
        value = record.get(name)
        if value is None:
            continue
        if name == "engine":
            if not _count(value):
                return "engine is not a non-negative integer"
        elif not isinstance(value, str):
            return f"{name} is not a string"
        out[name] = value
    return out


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# --- the three record shapes ----------------------------------------------------------------------


def _capture_rows(record: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]] | str:
    if not isinstance(record.get(schema.REQUEST_KEY), str):
        return "request_key is not a string"
    labels = _labels(record)
    if isinstance(labels, str):
        return labels
    row = {name: record.get(name) for name in schema.REQUESTS}
    return [{**row, **labels, "finish_reason": _text(record.get("finish_reason"))}]


def _openai_rows(record: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]] | str:
    choices: Any = record.get("choices")
    request_id = record.get("id")
    reasons = state.setdefault("finish_reasons", {})
    single = isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
    if single and choices[0].get("finish_reason") is not None and isinstance(request_id, str):
        reasons[request_id] = choices[0]["finish_reason"]  # a stream's last content chunk says it
    metrics = record.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if spec is None:
        state["without"] = state.get("without", 0) + 1  # a stream chunk, or a response without the metrics
        return []
    if not isinstance(request_id, str):
        return "id is not a string"
    row = vllm_request_columns(spec)
    if isinstance(row, str):
        return row
    usage: dict[str, Any] = record["usage"] if isinstance(record.get("usage"), dict) else {}
    labels = _labels(record)
    if isinstance(labels, str):
        return labels
    created: Any = record.get("created")
    return [
        {
            "ts": float(created) if _count(created) else None,
            **labels,
            "model": _text(record.get("model")),
            schema.REQUEST_KEY: schema.request_key(request_id),
            "finish_reason": _text(reasons.pop(request_id, None)),
            "num_prompt_tokens": usage.get("prompt_tokens"),
            "num_output_tokens": usage.get("completion_tokens"),
            **row,
        }
    ]


def _offline_rows(record: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]] | str:
    request_id = record.get("request_id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return "request_id is not a string"
    outputs = record.get("outputs")
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        return "outputs is not a list of objects"
    prompt = record.get("num_prompt_tokens")
    if prompt is None and isinstance(record.get("prompt_token_ids"), list):
        prompt = len(record["prompt_token_ids"])
    labels = _labels(record)
    if isinstance(labels, str):
        return labels
    rows = []
    for position, output in enumerate(outputs):
        if output.get("spec_decode_metrics") is None:
            state["without"] = state.get("without", 0) + 1
            continue
        row = vllm_request_columns(output["spec_decode_metrics"])
        if isinstance(row, str):
            return row
        index = output.get("index", position)
        produced = output.get("num_output_tokens")
        if produced is None and isinstance(output.get("token_ids"), list):
            produced = len(output["token_ids"])
        key = str(request_id) if index == 0 else f"{request_id}:{index}"
        rows.append(
            {
                "ts": record.get("ts"),
                **labels,
                schema.REQUEST_KEY: schema.request_key(key),
                "finish_reason": _text(output.get("finish_reason")),
                "num_prompt_tokens": prompt,
                "num_output_tokens": produced,
                **row,
            }
        )
    return rows


_READERS = {FORMAT_CAPTURE: _capture_rows, FORMAT_OPENAI: _openai_rows, FORMAT_OFFLINE: _offline_rows}


def read(src: Source, fmt: str) -> tuple[pl.DataFrame, list[Skipped], int]:
    """The ``requests`` rows of one input in ``fmt``, what was skipped (and notices), and its line count."""
    data, cut = read_whole(src)
    skipped: list[Skipped] = [cut] if cut is not None else []
    rows: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    reader = _READERS[fmt]
    lines = max((n for n, raw in enumerate(data.split(b"\n"), start=1) if raw.strip()), default=0)
    records, bad = _records(data)
    skipped += [Skipped(src.name, number, why) for number, why in bad]
    for number, record in records:
        if not isinstance(record, dict):
            skipped.append(Skipped(src.name, number, "not a JSON object"))
            continue
        found = reader(record, state)
        if isinstance(found, str):
            skipped.append(Skipped(src.name, number, found))
            continue
        problems = [p for p in map(request_problem, found) if p is not None]
        if problems:
            skipped.append(Skipped(src.name, number, problems[0]))
            continue
        rows.extend(found)
    if state.get("without") and fmt != FORMAT_CAPTURE:
        where = "metrics.speculative_decoding" if fmt == FORMAT_OPENAI else "spec_decode_metrics"
        hint = "vLLM fills it with --per-request-spec-decode-metrics summary|detailed (streams: the final usage chunk)"
        skipped.append(Notice(src.name, None, f"{state['without']} record(s) without {where}, passed over ({hint})"))
    frame = pl.DataFrame(rows, schema=schema.REQUESTS) if rows else schema.empty(schema.REQUESTS)
    return frame, skipped, lines


def _read_requests(src: Source, fmt: str, progress: Progress = None) -> Read:
    rows, skipped, lines = read(src, fmt)
    return Read(
        SourceReport(src.name, fmt, lines, 0, len(skipped)), skipped, windows=schema.empty(schema.WINDOWS).lazy(),
        requests=rows,
    )  # fmt: skip


READER = Reader(FORMATS, looks_like_requests, _read_requests, detect_order=2, list_order=4)


__all__ = ["FORMATS", "looks_like_requests", "offline_record", "read", "request_problem", "vllm_request_columns"]
