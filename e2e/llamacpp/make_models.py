"""Writes two tiny llama models with random weights around a vocabulary file of llama.cpp's sources.

    python make_models.py VOCAB.gguf OUT_DIR  →  OUT_DIR/target.gguf, OUT_DIR/draft-other.gguf

A 2-layer, 64-wide llama is a valid model for llama-server; its output is noise, which is
all the end-to-end run needs: with itself as draft, greedy decoding accepts (almost) every
drafted token; with a draft of other random weights, almost none. Seeds are fixed, so the
files (and so the engine's output) are the same on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_FF = 128
N_CTX = 512
TARGET_SEED = 1
OTHER_DRAFT_SEED = 2


def tokenizer_fields(vocab: Path) -> list[tuple[str, object, GGUFValueType, GGUFValueType | None]]:
    reader = GGUFReader(vocab)
    out = []
    for name, fld in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = fld.types[0]
        sub = fld.types[1] if vtype == GGUFValueType.ARRAY else None
        out.append((name, fld.contents(), vtype, sub))
    return out


def write_model(path: Path, fields, n_vocab: int, seed: int) -> None:
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    w = GGUFWriter(str(path), "llama")
    w.add_name(f"specan-e2e-random-{seed}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)  # all F32
    for name, value, vtype, sub in fields:
        w.add_key_value(name, value, vtype, sub_type=sub)
    w.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{t}.weight", weight(N_EMBD, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    w.add_tensor("output.weight", weight(n_vocab, N_EMBD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(vocab: str, out_dir: str) -> None:
    fields = tokenizer_fields(Path(vocab))
    n_vocab = next(len(v) for n, v, _, _ in fields if n == "tokenizer.ggml.tokens")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_model(out / "target.gguf", fields, n_vocab, TARGET_SEED)
    write_model(out / "draft-other.gguf", fields, n_vocab, OTHER_DRAFT_SEED)


if __name__ == "__main__":
    main(*sys.argv[1:])
