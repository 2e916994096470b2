"""Tiny random-init Llama models for running real vLLM speculative decoding on a CPU.

Used by the tests and by the example recordings; needs ``torch``, ``transformers``,
``tokenizers`` and ``safetensors`` (all come with vLLM). Nothing is downloaded: a byte-level
BPE tokenizer is trained on a paragraph of text and every weight is drawn from fixed seeds,
so the files are identical on every run.

``build(out_dir)`` writes:

- ``target``: a 4-layer Llama (hidden 128) with the tokenizer;
- ``draft``: the target's first 2 layers with its embeddings, norm and head (partial acceptance);
- ``copy``: an exact copy of the target (every draft token accepted);
- ``random``: a differently seeded model of the same shape (almost nothing accepted);
- ``eagle``: a 1-layer EAGLE head for method ``eagle`` (partial acceptance).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy does not analyse the model stack (see [tool.mypy] in pyproject.toml)
    from transformers import LlamaConfig, PreTrainedTokenizerFast

SEED = 1234
RANDOM_SEED = 4321
DRAFT_LAYERS = 2
# The target's layers after the first get their output projections scaled by this factor, so
# the early layers dominate and drafts made of the first layers agree with the target part of
# the time (at 1.0 a random-init truncated draft almost never agrees).
LATE_LAYER_SCALE = 0.15

TEXT = """\
Speculative decoding lets a small draft propose several tokens that a large target model
checks in one forward pass. When the draft guesses well, the target accepts many tokens per
step and generation gets faster; when it guesses badly, the extra work is wasted.
The n-gram method needs no draft model at all: it looks for the last few tokens earlier in the
prompt and copies whatever followed them. It works well on code, on summaries that quote their
source, and on any text that repeats itself.
A serving engine batches many requests together. With a small batch the accelerator has spare
compute and speculation is cheap; with a large batch the spare compute is gone and drafts that
are rejected cost real throughput. Operators watch the acceptance rate, the mean acceptance
length and the per-position acceptance rate to decide how many tokens to speculate.
The quick brown fox jumps over the lazy dog. 0123456789, ;:!?()[]{}"'-+=*/<>@#$%&_
"""

#: Prompts for runs with these models: repetitive text, so ngram prompt lookup finds matches (as it
#: does on code and on summaries that quote their source). The examples, benchmarks and tests share them.
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "Speculative decoding lets a small draft propose several tokens that a large target model checks",
    "A serving engine batches many requests together. A serving engine batches many requests",
    "0123456789 0123456789 0123456789 0123456789 0123",
    "Operators watch the acceptance rate, the mean acceptance length and the per-position rate.",
    "With a small batch the accelerator has spare compute and speculation is cheap; with a large batch",
    "It works well on code, on summaries that quote their source, and on any text that repeats itself.",
    "The n-gram method needs no draft model at all: it looks for the last few tokens earlier in the prompt",
]

LLAMA = dict(
    hidden_size=128,
    intermediate_size=256,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
    torch_dtype="float32",
)


def build_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<unk>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(TEXT.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    return fast


def config(tok: PreTrainedTokenizerFast, layers: int) -> LlamaConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        num_hidden_layers=layers,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        **LLAMA,
    )


def build(out_dir: str | Path) -> dict[str, Path]:
    """Write the models under ``out_dir`` (see the module docstring); return their folders."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    out = Path(out_dir)
    paths = {name: out / name for name in ("target", "draft", "copy", "random", "eagle")}
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(paths["target"])
    for name in ("draft", "copy", "random"):
        tok.save_pretrained(paths[name])

    # Target: random init from a fixed seed; later layers damped so that early layers dominate.
    torch.manual_seed(SEED)
    target = LlamaForCausalLM(config(tok, 4)).eval()
    with torch.no_grad():
        for layer in target.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(LATE_LAYER_SCALE)
            layer.mlp.down_proj.weight.mul_(LATE_LAYER_SCALE)
    target.save_pretrained(paths["target"])
    target.save_pretrained(paths["copy"])
    sd = target.state_dict()

    # Draft: the target's first DRAFT_LAYERS layers plus its embeddings, final norm and head.
    draft = LlamaForCausalLM(config(tok, DRAFT_LAYERS)).eval()
    draft.load_state_dict(
        {k: v for k, v in sd.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) < DRAFT_LAYERS}
    )
    draft.save_pretrained(paths["draft"])

    # Random: same shape, another seed: its guesses match the target's only by chance.
    torch.manual_seed(RANDOM_SEED)
    LlamaForCausalLM(config(tok, DRAFT_LAYERS)).eval().save_pretrained(paths["random"])

    # EAGLE head: fc([token embedding, target hidden]) -> one decoder layer -> target's lm_head.
    # vLLM shares the target's embeddings and lm_head, so only fc and layers.0 are stored, and
    # vLLM drops layer 0's input norm. The target's layer 0 is copied and the missing norm is
    # folded into a constant scale: fc passes the embedding scaled to unit RMS (the hidden part
    # is ignored) and the layer's output projections are scaled to match. The head then behaves
    # like a 1-layer truncated target and agrees with it part of the time.
    emb = sd["model.embed_tokens.weight"]
    scale = float(emb.pow(2).mean().rsqrt())
    hidden = emb.shape[1]
    weights = {"fc.weight": torch.cat([torch.eye(hidden) * scale, torch.zeros(hidden, hidden)], dim=1)}
    for k, v in sd.items():
        if k.startswith("model.layers.0.") and "input_layernorm" not in k:
            if "o_proj" in k or "down_proj" in k:
                v = v * scale
            weights["layers.0." + k[len("model.layers.0.") :]] = v.clone().contiguous()
    save_file(weights, str(paths["eagle"] / "model.safetensors"), metadata={"format": "pt"})
    eagle_cfg = config(tok, 1).to_dict()
    eagle_cfg["architectures"] = ["LlamaForCausalLM"]
    (paths["eagle"] / "config.json").write_text(json.dumps(eagle_cfg, indent=2))
    return paths
