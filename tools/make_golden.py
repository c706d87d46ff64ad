#!/usr/bin/python3
"""Golden fixtures: tiny seeded GPT-2 and Llama models in plain PyTorch, and what PyTorch computes with them.

Run by hand (not by CI) with Debian's python3-torch: /usr/bin/python3 tools/make_golden.py
It rewrites tests/data/golden/<model>/ for every model in MODELS:

  model.sqdk           the model in our format (tools/sqdk.py's writer), f32
  hf/config.json       a Hugging Face config (HF field names) for the converter route
  hf/model.safetensors HF tensor names and layouts (GPT-2 Conv1D weights [in, out]), in the dtype of `hf_dtype`
  logits.npy           f32 [n_prompt, n_vocab]: PyTorch's logits at every position of the prompt
  logits_full.npy      f32 [n_prompt + 32, n_vocab]: logits at every position of prompt + greedy continuation
                       (row t predicts token t + 1; decode(generated[i]) after the prompt gives row n_prompt + i)
  greedy.json          {"prompt": [...], "generated": [...]}: 32 greedy tokens after the prompt
  fixture.json         what the files are, the config, the tokens, and the tolerance reasoning with measured figures

The models follow Hugging Face's math (GPT2LMHeadModel, LlamaForCausalLM) written out as plain tensor code, for
reading rather than speed; `transformers` is not needed. Every weight is rounded to a bfloat16-representable value
(and, where the HF copy is f16, to an f16-representable one), so the f32 .sqdk and an f16/bf16 safetensors hold
exactly the same numbers: both routes must give the same logits.
"""

import json
import math
import pathlib
import struct
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "data" / "golden"
N_PROMPT = 12
N_GENERATE = 32

# Each model: its sqdk config (engine/FORMAT.md field names) plus how its HF copy is stored.
# Sizes are kept tiny: all fixtures together stay under 3 MB.
MODELS = [
    dict(name="gpt2", arch="gpt2", d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=256,
         n_vocab=96, max_seq=64, norm_eps=1e-5, rope_theta=0.0, tied_embeddings=True, rope_interleaved=False,
         hf_dtype="f16", seed=1, emb_std=0.3, out_gain=3.0),
    dict(name="llama_mha", arch="llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=96,
         n_vocab=96, max_seq=64, norm_eps=1e-5, rope_theta=10000.0, tied_embeddings=False, rope_interleaved=False,
         hf_dtype="f16", seed=2, emb_std=1.0, out_gain=1.0),
    dict(name="llama_gqa", arch="llama", d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, head_dim=8, d_ff=128,
         n_vocab=96, max_seq=64, norm_eps=1e-6, rope_theta=10000.0, tied_embeddings=True, rope_interleaved=False,
         hf_dtype="bf16", seed=3, emb_std=0.3, out_gain=3.0),
    dict(name="llama_hd80", arch="llama", d_model=160, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=80, d_ff=32,
         n_vocab=96, max_seq=64, norm_eps=1e-5, rope_theta=500000.0, tied_embeddings=True, rope_interleaved=False,
         hf_dtype="bf16", seed=4, emb_std=0.3, out_gain=3.0),
    dict(name="llama_interleaved", arch="llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
         d_ff=64, n_vocab=96, max_seq=64, norm_eps=1e-5, rope_theta=10000.0, tied_embeddings=True,
         rope_interleaved=True, hf_dtype="f32", seed=5, emb_std=0.3, out_gain=3.0),
]

# ----------------------------------------------------------------------------------------------------------------
# Random weights, in Hugging Face names and layouts.
# Scales give activations of order 1 and logits of order 10: linear weights N(0, 1/fan_in), embeddings
# N(0, emb_std^2), norm weights 1 + N(0, 0.1), biases N(0, 0.1). With a tied head and emb_std 1 the residual stream
# is dominated by the current token's own embedding and greedy decoding repeats the last token forever (a weak
# test of the KV cache), so tied models use emb_std 0.3 and block output projections (attn out, ffn down) scaled
# by out_gain 3, which gives varied continuations.


def round_weight(w, hf_dtype):
    """Rounds to a bf16-representable value (and f16-representable when the HF copy is f16)."""
    w = w.to(torch.bfloat16).to(torch.float32)
    if hf_dtype == "f16":
        w = torch.where(w.abs() < 2.0**-14, torch.zeros_like(w), w)  # below f16's normal range
        assert torch.equal(w.to(torch.float16).to(torch.float32), w)
    return w


def make_gpt2_weights(cfg, g):
    """GPT2LMHeadModel state_dict names; Conv1D weights are [in, out] (x @ W + b)."""
    D, F, V = cfg["d_model"], cfg["d_ff"], cfg["n_vocab"]

    def lin(n_in, n_out):
        return torch.randn(n_in, n_out, generator=g) / math.sqrt(n_in)

    def vec(n, mean=0.0):
        return mean + 0.1 * torch.randn(n, generator=g)

    p = {"transformer.wte.weight": cfg["emb_std"] * torch.randn(V, D, generator=g),
         "transformer.wpe.weight": 0.5 * torch.randn(cfg["max_seq"], D, generator=g)}
    for i in range(cfg["n_layers"]):
        h = f"transformer.h.{i}."
        p[h + "ln_1.weight"], p[h + "ln_1.bias"] = vec(D, 1.0), vec(D)
        p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"] = lin(D, 3 * D), vec(3 * D)
        p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"] = cfg["out_gain"] * lin(D, D), vec(D)
        p[h + "ln_2.weight"], p[h + "ln_2.bias"] = vec(D, 1.0), vec(D)
        p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"] = lin(D, F), vec(F)
        p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"] = cfg["out_gain"] * lin(F, D), vec(D)
    p["transformer.ln_f.weight"], p["transformer.ln_f.bias"] = vec(D, 1.0), vec(D)
    return {k: round_weight(v, cfg["hf_dtype"]) for k, v in p.items()}


def make_llama_weights(cfg, g):
    """LlamaForCausalLM state_dict names; nn.Linear weights are [out, in] (x @ W.T).

    q_proj/k_proj rows are in the layout the model's RoPE expects: Hugging Face's (rotate-half) for
    rope_interleaved=False, Meta's original (interleaved pairs) for rope_interleaved=True.
    """
    D, F, V = cfg["d_model"], cfg["d_ff"], cfg["n_vocab"]
    H, KV, hd = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]

    def lin(n_out, n_in):
        return torch.randn(n_out, n_in, generator=g) / math.sqrt(n_in)

    def norm_w(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    p = {"model.embed_tokens.weight": cfg["emb_std"] * torch.randn(V, D, generator=g)}
    for i in range(cfg["n_layers"]):
        L = f"model.layers.{i}."
        p[L + "input_layernorm.weight"] = norm_w(D)
        p[L + "self_attn.q_proj.weight"] = lin(H * hd, D)
        p[L + "self_attn.k_proj.weight"] = lin(KV * hd, D)
        p[L + "self_attn.v_proj.weight"] = lin(KV * hd, D)
        p[L + "self_attn.o_proj.weight"] = cfg["out_gain"] * lin(D, H * hd)
        p[L + "post_attention_layernorm.weight"] = norm_w(D)
        p[L + "mlp.gate_proj.weight"] = lin(F, D)
        p[L + "mlp.up_proj.weight"] = lin(F, D)
        p[L + "mlp.down_proj.weight"] = cfg["out_gain"] * lin(D, F)
    p["model.norm.weight"] = norm_w(D)
    if not cfg["tied_embeddings"]:
        p["lm_head.weight"] = lin(V, D)
    return {k: round_weight(v, cfg["hf_dtype"]) for k, v in p.items()}


# ----------------------------------------------------------------------------------------------------------------
# The forward passes: one function per family, top to bottom, on a whole token sequence (no KV cache needed at
# this size). `rope_tables` chooses how cos/sin are computed: "hf" as Hugging Face does (float32 inv_freq, angle
# and cos/sin), "f64" in double rounded once to the working dtype (as sqrtdk's RopeTable does).


def causal_attention(q, k, v, n_heads, n_kv_heads, head_dim):
    """q [T, n_heads*hd], k/v [T, n_kv_heads*hd] -> [T, n_heads*hd]; softmax(q k^T / sqrt(hd) + causal mask) v."""
    T = q.shape[0]
    q = q.view(T, n_heads, head_dim).transpose(0, 1)  # [H, T, hd]
    k = k.view(T, n_kv_heads, head_dim).transpose(0, 1)  # [KV, T, hd]
    v = v.view(T, n_kv_heads, head_dim).transpose(0, 1)
    group = n_heads // n_kv_heads  # HF repeat_kv: kv head j serves query heads j*group .. (j+1)*group - 1
    k = k.repeat_interleave(group, dim=0)
    v = v.repeat_interleave(group, dim=0)
    scores = q @ k.transpose(1, 2) / math.sqrt(head_dim)  # [H, T, T]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # [H, T, hd]
    return out.transpose(0, 1).reshape(T, n_heads * head_dim)


def gelu_tanh(x):
    """HF NewGELUActivation ("gelu_new"), GPT-2's activation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_forward(p, cfg, tokens):
    """GPT2LMHeadModel: tokens [T] -> logits [T, n_vocab]."""
    D, H, eps = cfg["d_model"], cfg["n_heads"], cfg["norm_eps"]
    T = len(tokens)
    ln = lambda x, name: torch.nn.functional.layer_norm(x, (D,), p[name + ".weight"], p[name + ".bias"], eps)
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:T]  # [T, D]
    for i in range(cfg["n_layers"]):
        h = f"transformer.h.{i}."
        a = ln(x, h + "ln_1")
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # [T, 3D]: q | k | v
        q, k, v = qkv.split(D, dim=-1)
        a = causal_attention(q, k, v, H, H, D // H)
        x = x + a @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = ln(x, h + "ln_2")
        m = gelu_tanh(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])  # [T, d_ff]
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = ln(x, "transformer.ln_f")
    return x @ p["transformer.wte.weight"].T  # tied head


def rms_norm(x, w, eps):
    """HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope_cos_sin(T, head_dim, theta, dtype, rope_tables):
    """cos, sin [T, head_dim/2] of angle(pos, i) = pos * theta^(-2i/head_dim)."""
    if rope_tables == "hf":  # LlamaRotaryEmbedding: float32 throughout
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)
        return freqs.cos().to(dtype), freqs.sin().to(dtype)
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def rope(x, n_heads, head_dim, cos, sin, interleaved):
    """x [T, n_heads*head_dim]; rotates pairs (i, i + hd/2) (HF rotate_half) or (2i, 2i+1) (Meta)."""
    T = x.shape[0]
    x = x.view(T, n_heads, head_dim)
    c, s = cos[:, None, :], sin[:, None, :]  # [T, 1, hd/2]
    if interleaved:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1)  # [T, H, hd/2, 2]
    else:  # HF: q * cat(cos, cos) + rotate_half(q) * cat(sin, sin), rotate_half(q) = cat(-q2, q1)
        x0, x1 = x[..., : head_dim // 2], x[..., head_dim // 2:]
        out = torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1)
    return out.reshape(T, n_heads * head_dim)


def llama_forward(p, cfg, tokens, rope_tables="hf", interleaved=None):
    """LlamaForCausalLM: tokens [T] -> logits [T, n_vocab]."""
    H, KV, hd, eps = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["norm_eps"]
    interleaved = cfg["rope_interleaved"] if interleaved is None else interleaved
    T = len(tokens)
    x = p["model.embed_tokens.weight"][tokens]  # [T, D]
    cos, sin = rope_cos_sin(T, hd, cfg["rope_theta"], x.dtype, rope_tables)
    for i in range(cfg["n_layers"]):
        L = f"model.layers.{i}."
        a = rms_norm(x, p[L + "input_layernorm.weight"], eps)
        q = rope(a @ p[L + "self_attn.q_proj.weight"].T, H, hd, cos, sin, interleaved)
        k = rope(a @ p[L + "self_attn.k_proj.weight"].T, KV, hd, cos, sin, interleaved)
        v = a @ p[L + "self_attn.v_proj.weight"].T
        x = x + causal_attention(q, k, v, H, KV, hd) @ p[L + "self_attn.o_proj.weight"].T
        m = rms_norm(x, p[L + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(m @ p[L + "mlp.gate_proj.weight"].T)  # [T, d_ff]
        x = x + (gate * (m @ p[L + "mlp.up_proj.weight"].T)) @ p[L + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["lm_head.weight"] if "lm_head.weight" in p else p["model.embed_tokens.weight"]
    return x @ head.T


def forward(p, cfg, tokens, **kw):
    with torch.no_grad():
        return gpt2_forward(p, cfg, tokens) if cfg["arch"] == "gpt2" else llama_forward(p, cfg, tokens, **kw)


def greedy(p, cfg, prompt, n_new):
    """Greedy decoding by re-running the whole sequence each step; returns (new tokens, top-1 minus top-2 gaps)."""
    tokens, gaps = list(prompt), []
    for _ in range(n_new):
        last = forward(p, cfg, tokens)[-1]
        top2 = torch.topk(last, 2).values
        gaps.append(float(top2[0] - top2[1]))
        tokens.append(int(torch.argmax(last)))
    return tokens[len(prompt):], gaps


# ----------------------------------------------------------------------------------------------------------------
# Writers: Hugging Face folder (config.json + hand-written safetensors) and our .sqdk.


def meta_to_hf_permute(w, n_heads, head_dim):
    """Meta (interleaved-pair) q/k rows -> HF (rotate-half) rows, as HF's convert_llama_weights_to_hf permute():
    within each head, HF row j < hd/2 is Meta row 2j and HF row hd/2 + j is Meta row 2j + 1."""
    n_in = w.shape[1]
    return w.view(n_heads, head_dim // 2, 2, n_in).transpose(1, 2).reshape(n_heads * head_dim, n_in)


def hf_tensors(p, cfg):
    """The state_dict as a HF checkpoint stores it (tied heads omitted, as save_pretrained does)."""
    if cfg["arch"] == "llama" and cfg["rope_interleaved"]:
        # HF checkpoints are always rotate-half: permute q/k rows, as converting a Meta checkpoint would.
        p = dict(p)
        for i in range(cfg["n_layers"]):
            L = f"model.layers.{i}.self_attn."
            p[L + "q_proj.weight"] = meta_to_hf_permute(p[L + "q_proj.weight"], cfg["n_heads"], cfg["head_dim"])
            p[L + "k_proj.weight"] = meta_to_hf_permute(p[L + "k_proj.weight"], cfg["n_kv_heads"], cfg["head_dim"])
    return p


def hf_config(cfg):
    torch_dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[cfg["hf_dtype"]]
    if cfg["arch"] == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": cfg["n_vocab"],
                "n_positions": cfg["max_seq"], "n_ctx": cfg["max_seq"], "n_embd": cfg["d_model"],
                "n_layer": cfg["n_layers"], "n_head": cfg["n_heads"], "n_inner": cfg["d_ff"],
                "activation_function": "gelu_new", "layer_norm_epsilon": cfg["norm_eps"],
                "tie_word_embeddings": True, "scale_attn_weights": True, "torch_dtype": torch_dtype}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg["n_vocab"],
            "hidden_size": cfg["d_model"], "intermediate_size": cfg["d_ff"], "num_hidden_layers": cfg["n_layers"],
            "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_heads"],
            "head_dim": cfg["head_dim"], "max_position_embeddings": cfg["max_seq"], "rms_norm_eps": cfg["norm_eps"],
            "rope_theta": cfg["rope_theta"], "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": cfg["tied_embeddings"], "torch_dtype": torch_dtype}


def tensor_bytes(t, dtype):
    a = t.detach().contiguous()
    if dtype == "f32":
        return a.numpy().astype("<f4").tobytes()
    if dtype == "f16":
        return a.numpy().astype("<f2").tobytes()
    # bf16: the top 16 bits of the f32 pattern (exact: weights are bf16-representable).
    bits = a.numpy().astype("<f4").view("<u4")
    assert np.all((bits & 0xFFFF) == 0)
    return (bits >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype):
    """safetensors: u64 LE header length, JSON header {name: {dtype, shape, data_offsets}} padded with spaces to a
    multiple of 8, then the raw little-endian data (offsets relative to the data start)."""
    st_dtype = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        blob = tensor_bytes(tensors[name], dtype)
        header[name] = {"dtype": st_dtype, "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def sqdk_tensors(p, cfg):
    """FORMAT.md names and layouts: linear weights [out, in] (GPT-2's Conv1D weights transposed)."""
    t = {}
    if cfg["arch"] == "gpt2":
        t["tok_emb"] = p["transformer.wte.weight"]
        t["pos_emb"] = p["transformer.wpe.weight"]
        for i in range(cfg["n_layers"]):
            h, b = f"transformer.h.{i}.", f"blk.{i}."
            for ours, theirs, transpose in [("attn_norm", "ln_1", False), ("attn_qkv", "attn.c_attn", True),
                                            ("attn_out", "attn.c_proj", True), ("ffn_norm", "ln_2", False),
                                            ("ffn_up", "mlp.c_fc", True), ("ffn_down", "mlp.c_proj", True)]:
                w = p[h + theirs + ".weight"]
                t[b + ours + ".weight"] = w.T.contiguous() if transpose else w
                t[b + ours + ".bias"] = p[h + theirs + ".bias"]
        t["out_norm.weight"], t["out_norm.bias"] = p["transformer.ln_f.weight"], p["transformer.ln_f.bias"]
        return t
    t["tok_emb"] = p["model.embed_tokens.weight"]
    for i in range(cfg["n_layers"]):
        L, b = f"model.layers.{i}.", f"blk.{i}."
        t[b + "attn_norm.weight"] = p[L + "input_layernorm.weight"]
        t[b + "attn_q.weight"] = p[L + "self_attn.q_proj.weight"]  # in the model's own RoPE layout (see flags)
        t[b + "attn_k.weight"] = p[L + "self_attn.k_proj.weight"]
        t[b + "attn_v.weight"] = p[L + "self_attn.v_proj.weight"]
        t[b + "attn_out.weight"] = p[L + "self_attn.o_proj.weight"]
        t[b + "ffn_norm.weight"] = p[L + "post_attention_layernorm.weight"]
        t[b + "ffn_gate.weight"] = p[L + "mlp.gate_proj.weight"]
        t[b + "ffn_up.weight"] = p[L + "mlp.up_proj.weight"]
        t[b + "ffn_down.weight"] = p[L + "mlp.down_proj.weight"]
    t["out_norm.weight"] = p["model.norm.weight"]
    if not cfg["tied_embeddings"]:
        t["lm_head.weight"] = p["lm_head.weight"]
    return t


SQDK_CONFIG_FIELDS = ["arch", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "n_vocab",
                      "max_seq", "norm_eps", "rope_theta", "tied_embeddings", "rope_interleaved"]


def sqdk_config(cfg):
    c = {k: cfg[k] for k in SQDK_CONFIG_FIELDS}
    c.update(tokenizer="none", bos_id=None, eos_id=None)
    return c


def write_sqdk(path, cfg, tensors):
    """Writes the .sqdk with tools/sqdk.py (the format's Python reference writer), f32, in canonical tensor order
    (sqdk_tensors builds the dict in that order)."""
    sys.path.insert(0, str(REPO / "tools"))
    import sqdk

    sqdk.write_from_state_dict(str(path), sqdk_config(cfg), tensors, dtype="f32")


def read_safetensors(path):
    """Reads back what write_safetensors wrote (f32/f16/bf16) as float32 torch tensors: the self-check below."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        chunk = data[begin:end]
        if info["dtype"] == "F32":
            a = np.frombuffer(chunk, "<f4")
        elif info["dtype"] == "F16":
            a = np.frombuffer(chunk, "<f2").astype(np.float32)
        else:
            a = (np.frombuffer(chunk, "<u2").astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
    return out


def self_check(out, cfg, p, full, logits_full):
    """The written files hold what PyTorch computed with: the safetensors copy, read back, reproduces the logits
    (bit for bit, or to float noise for the permuted interleaved model), and the .sqdk holds sqdk_tensors exactly."""
    hf = read_safetensors(out / "hf" / "model.safetensors")
    if cfg["arch"] == "llama" and cfg["rope_interleaved"]:
        diff = float((forward(hf, cfg, full, interleaved=False) - logits_full).abs().max())
        assert diff <= 1e-5 * float(logits_full.abs().max()), diff
    else:
        assert torch.equal(forward(hf, cfg, full), logits_full)
    sys.path.insert(0, str(REPO / "tools"))
    import sqdk

    _, tensors = sqdk.read_sqdk(str(out / "model.sqdk"))
    want = sqdk_tensors(p, cfg)
    assert [name for name, _ in tensors] == list(want)
    for name, array in tensors:
        assert np.array_equal(np.asarray(array, dtype=np.float32), want[name].numpy()), name


# ----------------------------------------------------------------------------------------------------------------


MIN_GAP = 0.002  # of max |logit|: about 1000x the float32 noise measured below (f32 vs f64, ~1e-6 relative)
MIN_DISTINCT = 6  # distinct tokens among the 32 generated


def choose_prompt(p, cfg, g):
    """A random 12-token prompt whose greedy continuation is varied (>= MIN_DISTINCT distinct tokens) and never has a
    near tie (top-1 minus top-2 >= MIN_GAP x the largest |logit|), so a correct engine cannot flip a token on
    rounding; tries prompts until one qualifies."""
    for attempt in range(300):
        prompt = torch.randint(0, cfg["n_vocab"], (N_PROMPT,), generator=g).tolist()
        generated, gaps = greedy(p, cfg, prompt, N_GENERATE)
        scale = float(forward(p, cfg, prompt + generated).abs().max())
        if min(gaps) >= MIN_GAP * scale and len(set(generated)) >= MIN_DISTINCT:
            return prompt, generated, gaps, attempt
    raise RuntimeError(f"{cfg['name']}: no prompt with clear greedy margins")


def to64(p):
    return {k: v.to(torch.float64) for k, v in p.items()}


def build(cfg):
    g = torch.Generator().manual_seed(cfg["seed"])
    p = make_gpt2_weights(cfg, g) if cfg["arch"] == "gpt2" else make_llama_weights(cfg, g)
    prompt, generated, gaps, attempts = choose_prompt(p, cfg, g)
    full = prompt + generated

    logits_full = forward(p, cfg, full)  # f32, HF's way throughout
    logits = forward(p, cfg, prompt)
    # The prompt-only pass and the full pass agree on the prompt rows up to float reassociation.
    prompt_vs_full = float((logits - logits_full[:N_PROMPT]).abs().max())
    scale = float(logits_full.abs().max())

    # Figures for the tolerance: the same model in float64 (exact-ish), and in f32 with sqrtdk's RoPE tables.
    logits64 = forward(to64(p), cfg, full, **({} if cfg["arch"] == "gpt2" else {"rope_tables": "f64"}))
    f32_vs_f64 = float((logits_full.double() - logits64).abs().max())
    generated64, _ = greedy(to64(p), cfg, prompt, N_GENERATE)
    assert generated64 == generated, f"{cfg['name']}: float64 greedy differs from float32 greedy"
    figures = {"max_abs_logit": scale, "f32_vs_f64_max_abs": f32_vs_f64,
               "prompt_pass_vs_full_pass_max_abs": prompt_vs_full,
               "min_greedy_gap": min(gaps), "min_greedy_gap_over_max_abs_logit": min(gaps) / scale}
    if cfg["arch"] == "llama":
        ours = forward(p, cfg, full, rope_tables="f64")
        figures["rope_tables_hf_f32_vs_f64_max_abs"] = float((logits_full - ours).abs().max())
        hf = hf_tensors(p, cfg)
        if cfg["rope_interleaved"]:
            # The HF copy (q/k permuted, rotate-half) computes the same function as the Meta-layout model.
            figures["hf_permuted_rotate_half_vs_interleaved_max_abs"] = float(
                (forward(hf, cfg, full, interleaved=False) - logits_full).abs().max())
    else:
        hf = p

    out = OUT_DIR / cfg["name"]
    (out / "hf").mkdir(parents=True, exist_ok=True)
    np.save(out / "logits.npy", logits.numpy().astype(np.float32))
    np.save(out / "logits_full.npy", logits_full.numpy().astype(np.float32))
    (out / "greedy.json").write_text(json.dumps({"prompt": prompt, "generated": generated}) + "\n")
    (out / "hf" / "config.json").write_text(json.dumps(hf_config(cfg), indent=2) + "\n")
    write_safetensors(out / "hf" / "model.safetensors", hf, cfg["hf_dtype"])
    write_sqdk(out / "model.sqdk", cfg, sqdk_tensors(p, cfg))
    self_check(out, cfg, p, full, logits_full)

    tol = 1e-4
    fixture = {
        "name": cfg["name"],
        "config": sqdk_config(cfg),
        "files": {
            "sqdk": "model.sqdk",
            "hf_dir": "hf",
            "hf_safetensors_dtype": cfg["hf_dtype"],
            "logits": "logits.npy",
            "logits_shape": [N_PROMPT, cfg["n_vocab"]],
            "logits_full": "logits_full.npy",
            "logits_full_shape": [len(full), cfg["n_vocab"]],
            "greedy": "greedy.json",
            "notes": {
                "logits": "PyTorch prefill of the prompt: row t = logits after tokens[0..t]",
                "logits_full": "PyTorch over prompt + generated: row t predicts token t + 1; after prefilling the "
                               "prompt (last row n_prompt-1), decode(generated[i]) must give row n_prompt + i",
                "greedy": "argmax decoding, 32 tokens, no stop token",
                "hf_dir": "converter input: config.json (HF field names) + model.safetensors (HF names/layouts)",
            },
        },
        "prompt": prompt,
        "generated": generated,
        "seed": cfg["seed"],
        "prompt_attempts": attempts + 1,
        "figures": figures,
        "tolerance": {
            "logits_max_abs_over_max_abs_logit": tol,
            "logits_max_abs": tol * scale,
            "why": (
                "sqrtdk and PyTorch both compute in float32 but sum in different orders (GEMM blocking, "
                "attention, norms), so their logits differ by float32 reassociation noise: these f32 PyTorch logits "
                f"differ from a float64 run of the same model by {f32_vs_f64:.2e} ({f32_vs_f64 / scale:.1e} of "
                f"max |logit| {scale:.2f}); a correct engine lands within a few times that. "
                + ("RoPE: PyTorch (as HF) computes inv_freq, angle and cos/sin in float32, sqrtdk in double rounded "
                   "once; that difference alone moves these logits by "
                   f"{figures.get('rope_tables_hf_f32_vs_f64_max_abs', 0):.2e}. " if cfg["arch"] == "llama" else "")
                + f"The bound {tol:g} x max |logit| (issue 5) = {tol * scale:.2e} is "
                f"{tol * scale / max(f32_vs_f64, 1e-30):.0f}x the float64 difference. Greedy tokens compare "
                f"exactly: the smallest top-1 minus top-2 gap over the 32 steps is {min(gaps):.4f} "
                f"({min(gaps) / scale:.2%} of max |logit|, chosen >= {MIN_GAP:.1%}), more than twice the bound, "
                "so an engine within the logits bound cannot flip a token. The safetensors copy holds exactly the "
                f"same values (weights rounded to be representable in {cfg['hf_dtype']}), so the converter route "
                "must meet the same bound (and should equal the direct route to float noise)."
            ),
        },
    }
    if cfg["arch"] == "llama" and cfg["rope_interleaved"]:
        fixture["note"] = ("model.sqdk keeps Meta's q/k layout with the interleaved-RoPE flag; hf/ holds the "
                           "same model as a Hugging Face checkpoint (q/k rows permuted, rotate-half RoPE). Both "
                           "routes must match logits.npy.")
    if cfg["arch"] == "gpt2":
        fixture["note"] = ("hf/model.safetensors uses GPT2LMHeadModel names with the 'transformer.' prefix and "
                           "Conv1D weights [in, out]; lm_head.weight is omitted (tied), as save_pretrained does.")
    (out / "fixture.json").write_text(json.dumps(fixture, indent=2) + "\n")
    return fixture


def main():
    torch.set_num_threads(1)  # deterministic summation order in PyTorch's CPU kernels
    total = 0
    for cfg in MODELS:
        fixture = build(cfg)
        size = sum(f.stat().st_size for f in (OUT_DIR / cfg["name"]).rglob("*") if f.is_file())
        total += size
        f = fixture["figures"]
        print(f"{cfg['name']:18s} {size / 1024:7.1f} KiB  max|logit| {f['max_abs_logit']:6.2f}  "
              f"f32-f64 {f['f32_vs_f64_max_abs']:.2e}  min gap {f['min_greedy_gap']:.3f}")
    print(f"total {total / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
