"""Tiny local models for the speculative methods beyond ngram, draft model and EAGLE-1.

``build_method(out_dir, method)`` writes a target and (except for MiMo MTP, whose MTP layer
lives in the target's checkpoint) a draft folder for one of :data:`METHODS`; ``build_all`` writes
all of them. Like :mod:`specobs.testing.tiny_llama` (whose tokenizer, text and prompts these
reuse), nothing is downloaded or trained: every weight comes from fixed seeds or is copied from
the target, so the files are the same on every run and building takes a few seconds.

A random draft accepts almost nothing, so every draft here is *derived from its target*. The
common recipe: the target is a random-init 4-layer model in which layer 0 dominates (its
feed-forward output is amplified, the later layers' outputs are damped) and, where the draft
cannot see the context the way the target does, the attention's share is damped too. The draft
then reproduces the target's layer 0 on the token it is given, and agrees with the target
whenever the damped parts (the later layers, and the attention over earlier tokens) do not change
the greedy choice: part of the time. A draft position counts as accepted only when every earlier
one was, so the per-position acceptance falls with the position (for DFlash to nothing, below).

- ``eagle3`` (vLLM ``eagle3``): target ``LlamaForCausalLM``; draft ``LlamaForCausalLMEagle3``.
  The draft layer's attention and feed-forward are the target's layer 0, reading only the token
  embedding half of its ``[embedding, hidden]`` input (the hidden half and ``fc`` are zero, so
  the target's aux hidden states are ignored); vLLM shares the target's embeddings, and the
  draft's ``norm`` and ``lm_head`` are the target's. EAGLE-3 starts the draft's residual stream
  from its hidden input, not from the token embedding as the target does; with
  ``norm_before_residual`` and a zero ``hidden_norm`` that start is zero at every draft
  position, and the target's layer-0 outputs are amplified (:data:`EAGLE3_GAIN`) so the missing
  embedding is a small part of its residual stream. The draft is then a 1-layer truncation of the
  target at every position (it attends over its own KV cache, as the target's layer 0 does).
- ``mtp-mimo`` (vLLM ``mtp``): one folder, a Qwen2 target saved as ``MiMoForCausalLM`` with one
  MTP layer in the same checkpoint: ``input_proj`` is ``[0 | I]`` (previous hidden state
  ignored), ``token_layernorm`` folds the embedding's scale back in, the MTP block is a copy of
  the target's layer 0 and ``final_layernorm`` is the target's final norm: a 1-layer truncation of
  the target, which vLLM runs again for every further position (k > 1 reuses the one layer).
- ``mtp-gemma4`` (vLLM ``mtp``): target ``Gemma4ForCausalLM``; draft
  ``Gemma4AssistantForCausalLM``. The assistant's layers only have queries (they read the
  target's keys and values), so their attention output is switched off (``o_proj`` zero) and the
  assistant is the target's layer-0 feed-forward on the token (``pre_projection`` passes the
  scaled embedding and ignores the target's hidden state), with the target's final norm and
  (tied) embeddings as head: a "what follows this token" model; the target's attention, damped
  (:data:`GEMMA4_ATTENTION_SCALE`), is what it misses.
- ``dflash`` (vLLM ``dflash``): target ``Qwen3ForCausalLM``; draft ``DFlashDraftModel``. DFlash
  drafts a whole block at once: the query block is ``[last token, <mask> × k]``. The target's
  ``<mask>`` embedding is zero and ``fc`` is zero, so in the draft's attention (queries zero:
  uniform weights) the only non-zero value is the last token's: every slot sees that token, and
  the feed-forward (the target's layer 0, amplified in the draft so that it dominates the
  attention's length-dependent share) predicts what follows it. Position 0 agrees part of the
  time; the later slots know nothing more, repeat the same guess and agree only where the target
  repeats a token (with these prompts: never, so DFlash's later positions accept nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specobs.testing.tiny_llama import LATE_LAYER_SCALE, LLAMA, SEED, build_tokenizer

if TYPE_CHECKING:  # mypy does not analyse the model stack (see [tool.mypy] in pyproject.toml)
    from transformers import PreTrainedTokenizerFast

#: Method names accepted by :func:`build_method`, each with the ``method`` vLLM's speculative
#: config takes (and reports in its metrics; both MTP kinds are ``mtp``).
VLLM_METHOD = {"eagle3": "eagle3", "mtp-mimo": "mtp", "mtp-gemma4": "mtp", "dflash": "dflash"}
METHODS = tuple(VLLM_METHOD)
MASK_TOKEN = "<mask>"
LAYERS = 4
#: The Gemma 4 and DFlash targets: layer 0's feed-forward output is multiplied by a gain, so that
#: it dominates the residual stream (the drafts reproduce it, not the embedding or attention), and
#: the attention's output by a scale, because those drafts do not attend to the context: the
#: smaller, the more often the target's choice depends on the last token only. (In Gemma 4 every
#: sub-layer output is RMS-normalised: these multiply its post-norm's weight, which sets its size;
#: the embedding, scaled by sqrt(hidden), has an RMS of about 0.23 there.)
GEMMA4_FFN_GAIN = 4.0
GEMMA4_ATTENTION_SCALE = 0.05
DFLASH_FFN_GAIN = 8.0
DFLASH_ATTENTION_SCALE = 0.1
#: The EAGLE-3 target's layer-0 attention and feed-forward outputs are multiplied by this, so the
#: token embedding (which the EAGLE-3 draft's residual stream does not carry) is a small part of
#: its residual stream.
EAGLE3_GAIN = 8.0


@dataclass(frozen=True)
class Paths:
    """Model folders of one method: ``draft`` is None when the draft is inside the target."""

    target: Path
    draft: Path | None


def speculative_config(method: str, paths: Paths, k: int = 3) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for ``method`` with these models and ``k`` draft tokens."""
    config: dict[str, Any] = {"method": VLLM_METHOD[method], "num_speculative_tokens": k}
    if paths.draft is not None:
        config["model"] = str(paths.draft)
    return config


def build_all(out_dir: str | Path) -> dict[str, Paths]:
    """Every method of :data:`METHODS` under ``out_dir/<method>/``."""
    return {method: build_method(out_dir, method) for method in METHODS}


def build_method(out_dir: str | Path, method: str) -> Paths:
    """Write ``out_dir/<method>/target`` (and ``draft``) for ``method`` (see the module docstring)."""
    builders = {"eagle3": _eagle3, "mtp-mimo": _mimo, "mtp-gemma4": _gemma4, "dflash": _dflash}
    if method not in builders:
        raise ValueError(f"unknown method {method!r}; one of {', '.join(METHODS)}")
    root = Path(out_dir) / method
    paths = Paths(root / "target", None if method == "mtp-mimo" else root / "draft")
    for path in (paths.target, paths.draft):
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(paths)
    builders[method](tok, paths)
    return paths


def _tokenizer(paths: Paths) -> PreTrainedTokenizerFast:
    """tiny_llama's tokenizer plus a ``<mask>`` special token (DFlash's masked slots)."""
    tok = build_tokenizer(paths.target)
    tok.add_special_tokens({"additional_special_tokens": [MASK_TOKEN]})
    tok.save_pretrained(paths.target)
    if paths.draft is not None:
        tok.save_pretrained(paths.draft)
    return tok


def _common(tok: PreTrainedTokenizerFast, layers: int = LAYERS) -> dict[str, Any]:
    return dict(
        LLAMA,
        vocab_size=len(tok),
        num_hidden_layers=layers,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )


def _save(weights: dict[str, Any], folder: Path, config: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.detach().clone().contiguous() for k, v in weights.items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))


def _damp_late_layers(layers: Any, *names: str) -> None:
    """Scale the output projections ``names`` of every layer after the first."""
    import torch

    with torch.no_grad():
        for layer in list(layers)[1:]:
            for name in names:
                module = layer
                for part in name.split("."):
                    module = getattr(module, part)
                module.weight.mul_(LATE_LAYER_SCALE)


def _eagle3(tok: PreTrainedTokenizerFast, paths: Paths) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    assert paths.draft is not None
    torch.manual_seed(SEED)
    target = LlamaForCausalLM(LlamaConfig(**_common(tok))).eval()
    with torch.no_grad():
        target.model.layers[0].self_attn.o_proj.weight.mul_(EAGLE3_GAIN)
        target.model.layers[0].mlp.down_proj.weight.mul_(EAGLE3_GAIN)
    _damp_late_layers(target.model.layers, "self_attn.o_proj", "mlp.down_proj")
    target.save_pretrained(paths.target)
    sd = target.state_dict()
    hidden = target.config.hidden_size
    weights: dict[str, Any] = {
        "fc.weight": torch.zeros(hidden, 3 * hidden),
        "norm.weight": sd["model.norm.weight"],
        "lm_head.weight": sd["lm_head.weight"],
        # With norm_before_residual the residual stream starts as hidden_norm(hidden): a zero
        # weight makes it start at zero at every draft position, the first and the later ones.
        "midlayer.hidden_norm.weight": torch.zeros(hidden),
    }
    for key, value in sd.items():
        if not key.startswith("model.layers.0."):
            continue
        name = "midlayer." + key[len("model.layers.0.") :]
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            # Input is [input_layernorm(embedding), hidden_norm(fc(aux))]: read the first half.
            value = torch.cat([value, torch.zeros_like(value[:, :hidden])], dim=1)
        weights[name] = value
    config = LlamaConfig(**_common(tok, 1)).to_dict()
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=len(tok),
        target_hidden_size=hidden,
        eagle_aux_hidden_state_layer_ids=[1, 2, 3],
        norm_before_residual=True,
    )
    _save(weights, paths.draft, config)


def _mimo(tok: PreTrainedTokenizerFast, paths: Paths) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(SEED)
    target = Qwen2ForCausalLM(Qwen2Config(**_common(tok))).eval()
    _damp_late_layers(target.model.layers, "self_attn.o_proj", "mlp.down_proj")
    target.save_pretrained(paths.target)
    sd = target.state_dict()
    emb = sd["model.embed_tokens.weight"]
    hidden = emb.shape[1]
    # token_layernorm gives each embedding unit RMS times its weight: a constant equal to the
    # embeddings' mean RMS makes it (close to) the raw embedding the target's layer 0 sees.
    scale = float(emb.pow(2).mean().sqrt())
    prefix = "model.mtp_layers.0."
    weights = load_file(str(paths.target / "model.safetensors"))
    weights[prefix + "token_layernorm.weight"] = torch.full((hidden,), scale)
    weights[prefix + "hidden_layernorm.weight"] = torch.ones(hidden)
    weights[prefix + "input_proj.weight"] = torch.cat([torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1)
    weights[prefix + "final_layernorm.weight"] = sd["model.norm.weight"]
    for key, value in sd.items():
        if key.startswith("model.layers.0."):
            weights[prefix + key[len("model.layers.0.") :]] = value
    config = json.loads((paths.target / "config.json").read_text())
    config.update(architectures=["MiMoForCausalLM"], num_nextn_predict_layers=1)
    _save(weights, paths.target, config)


def _gemma4_text(tok: PreTrainedTokenizerFast, layers: int) -> dict[str, Any]:
    common = _common(tok, layers)
    for key in ("torch_dtype", "tie_word_embeddings"):
        common.pop(key)
    return dict(
        common,
        global_head_dim=LLAMA["head_dim"],
        layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        sliding_window=64,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        num_kv_shared_layers=0,
        final_logit_softcapping=30.0,
    )


def _gemma4(tok: PreTrainedTokenizerFast, paths: Paths) -> None:
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4ForCausalLM, Gemma4TextConfig

    assert paths.draft is not None
    torch.manual_seed(SEED)
    target = Gemma4ForCausalLM(Gemma4TextConfig(**_gemma4_text(tok, LAYERS))).eval()
    with torch.no_grad():
        # Every sub-layer output is RMS-normalised, so its scale is its post-norm's weight.
        for i, layer in enumerate(target.model.layers):
            late = LATE_LAYER_SCALE if i else 1.0
            layer.post_attention_layernorm.weight.mul_(GEMMA4_ATTENTION_SCALE * late)
            layer.post_feedforward_layernorm.weight.mul_(late if i else GEMMA4_FFN_GAIN)
    target.save_pretrained(paths.target)
    sd = target.state_dict()
    hidden = target.config.hidden_size
    weights: dict[str, Any] = {
        "model.embed_tokens.weight": sd["model.embed_tokens.weight"],
        "model.norm.weight": sd["model.norm.weight"],
        "pre_projection.weight": torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1),
        "post_projection.weight": torch.eye(hidden),
    }
    for i in range(2):
        for key, value in sd.items():
            if not key.startswith("model.layers.0.") or ".k_" in key or ".v_" in key:
                continue
            name = f"model.layers.{i}." + key[len("model.layers.0.") :]
            if name.endswith(("o_proj.weight",)) or (i and name.endswith("down_proj.weight")):
                value = torch.zeros_like(value)  # no attention; layer 1 passes its input through
            weights[name] = value
    text = _gemma4_text(tok, 2)
    config = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=hidden, use_ordered_embeddings=False)
    config.architectures = ["Gemma4AssistantForCausalLM"]
    _save(weights, paths.draft, config.to_dict())


def _dflash(tok: PreTrainedTokenizerFast, paths: Paths) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    assert paths.draft is not None
    mask_id = tok.convert_tokens_to_ids(MASK_TOKEN)
    torch.manual_seed(SEED)
    target = Qwen3ForCausalLM(Qwen3Config(**_common(tok))).eval()
    with torch.no_grad():
        target.model.embed_tokens.weight[mask_id] = 0.0
        first = target.model.layers[0]
        first.self_attn.o_proj.weight.mul_(DFLASH_ATTENTION_SCALE)
        first.mlp.down_proj.weight.mul_(DFLASH_FFN_GAIN)
    _damp_late_layers(target.model.layers, "self_attn.o_proj", "mlp.down_proj")
    target.save_pretrained(paths.target)
    sd = target.state_dict()
    hidden = target.config.hidden_size
    weights: dict[str, Any] = {
        "fc.weight": torch.zeros(hidden, 3 * hidden),
        "hidden_norm.weight": torch.ones(hidden),
        "norm.weight": sd["model.norm.weight"],
    }
    # Embedding RMS, folded back in after input_layernorm so the values carry the raw embedding.
    emb = sd["model.embed_tokens.weight"]
    scale = float(emb.pow(2).mean().sqrt())
    for i in range(2):
        for key, value in sd.items():
            if not key.startswith("model.layers.0."):
                continue
            name = f"layers.{i}." + key[len("model.layers.0.") :]
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                value = torch.zeros_like(value)  # uniform attention
            elif name.endswith("v_proj.weight"):
                value = torch.eye(hidden) * scale
            elif name.endswith("o_proj.weight"):
                value = torch.eye(hidden) if i == 0 else torch.zeros_like(value)
            elif name.endswith("input_layernorm.weight"):
                value = torch.ones_like(value)
            elif name.endswith("down_proj.weight"):
                # Layer 0's feed-forward, amplified so the attention's 1/length-scaled output does
                # not matter; layer 1 passes its input through.
                value = value * 100.0 if i == 0 else torch.zeros_like(value)
            weights[name] = value
    config = Qwen3Config(**_common(tok, 2)).to_dict()
    config.update(
        architectures=["DFlashDraftModel"],
        target_hidden_size=hidden,
        dflash_config={"mask_token_id": mask_id, "target_layer_ids": [0, 1, 3]},
    )
    _save(weights, paths.draft, config)
