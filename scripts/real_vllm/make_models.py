"""Build a tiny Llama target and a noisy-copy draft model, offline and byte-for-byte reproducible.

Runs inside the real-vLLM venv (torch, tokenizers, transformers). Usage: make_models.py OUT_DIR
"""

from __future__ import annotations

import glob
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 1234
VOCAB = 3072
HIDDEN = 256
LAYERS = 4
HEADS = 4  # head_dim 64
KV_HEADS = 2
INTERMEDIATE = 688
MAX_POSITIONS = 2048
LM_HEAD_SCALE = 14.0
"""Scales the random lm_head so next-token distributions are peaked, like a trained model's."""
DRAFT_NOISE = 0.018
"""Relative std of the noise added to the draft's weights: its argmax usually agrees."""
DEFAULT_TEMPERATURE = 0.6
"""generation_config.json default: a request without `temperature` samples at 0.6, not 1.0."""

SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on this Python's own stdlib sources (no download)."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_target(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    return model


def build_draft(target: LlamaForCausalLM) -> LlamaForCausalLM:
    draft = LlamaForCausalLM(target.config).float().eval()
    draft.load_state_dict(target.state_dict())
    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, weight in draft.named_parameters():
            if "norm" in name:  # RMSNorm weights are all ones: leave them
                continue
            std = weight.float().std().item()
            weight.add_(torch.randn(weight.shape, generator=generator) * std * DRAFT_NOISE)
    return draft


def save(model: Any, tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    generation = model.generation_config
    generation.do_sample = True
    generation.temperature = DEFAULT_TEMPERATURE
    generation.top_p = 1.0
    generation.bos_token_id = tokenizer.bos_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    generation.save_pretrained(folder)


def main(out_dir: Path) -> None:
    tokenizer = build_tokenizer()
    target = build_target(tokenizer)
    draft = build_draft(target)
    for name, model in (("target", target), ("draft", draft)):
        save(model, tokenizer, out_dir / name)
        params = sum(weight.numel() for weight in model.parameters())
        print(f"saved {name}: {out_dir / name} ({params / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT_DIR")
    main(Path(sys.argv[1]))
