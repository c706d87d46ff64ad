#!/usr/bin/python3
"""Writes a llama.cpp GGUF file (version 3) from a Hugging Face folder, the way llama.cpp's convert_hf_to_gguf.py
lays it out, with numpy only (no torch, no `gguf` package): for making test fixtures and for trying
`sqrtdk convert model.gguf` without llama.cpp.

    /usr/bin/python3 tools/gguf_writer.py HF_DIR OUT.gguf [--type f32|f16|bf16|q8_0] [--tokenizer PATH]
    /usr/bin/python3 tools/gguf_writer.py --fuzz-seeds tests/fuzz/corpus/fuzz_gguf   (the committed seed corpus)

HF_DIR holds config.json (LlamaForCausalLM or GPT2LMHeadModel) and model.safetensors (F32, F16 or BF16).
What llama.cpp does, and so does this:
  - tensor names token_embd, position_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_qkv, attn_output,
    ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output (absent when the embeddings are tied);
  - dimensions innermost first: a [out, in] weight has ne = [in, out]; GPT-2's Conv1D weights ([in, out] in HF)
    are transposed to [out, in] first;
  - llama q_proj / k_proj rows permuted from HF's rotate-half order to interleaved pairs:
    w.reshape(n_head, 2, head_dim // 2, in).swapaxes(1, 2).reshape(out, in), n_head = num_key_value_heads for k;
  - 1-D tensors (norms, biases) always F32; with --type q8_0 every 2-D tensor whose rows are whole blocks of 32 is
    Q8_0 (others F16), quantized exactly as ggml's quantize_row_q8_0_ref (see quantize_q8_0);
  - the data section and every tensor aligned to 32 bytes (general.alignment's default).

--tokenizer adds tokenizer.ggml.* from a tokenizer.json (bos/eos from tokenizer_config.json beside it, if any), GPT-2's
vocab.json + merges.txt or encoder.json + vocab.bpe (read as the tokenizer.json Hugging Face builds from them; bos/eos
<|endoftext|>, no BOS added), or a folder holding one of these:
  - a byte-level BPE (GPT-2, Llama 3, Qwen2): model "gpt2", tokens by id, merges as "left right", token_type
    (3 control for special added tokens, 4 user-defined for the other added tokens, else 1), and tokenizer.ggml.pre
    from the pre-tokenizer (GPT-2's ByteLevel regex -> "gpt-2", Llama 3's split regex -> "llama-bpe", Qwen2's ->
    "qwen2"; another is an error);
  - a SentencePiece-style BPE (byte_fallback or a Metaspace/'▁' normalizer: Llama 2, TinyLlama, Mistral): model
    "llama", tokens, token_type (6 for <0xNN> byte pieces, 2 unknown, 3/4 as above) and scores. tokenizer.json has
    no scores, only the merge list; readers (llama.cpp, sqrtdk's sentencepiece_merges) rebuild the merges from scores
    as Hugging Face's SentencePieceExtractor does: every split of each piece into two pieces, pieces by score,
    highest first. So the score of a piece is -(rank of the first merge that makes it), and pieces no merge makes
    get -(n_merges + id), below all of them. The merge list comes back exactly when it is what the extractor
    produced (all splits of a piece, adjacent); the writer rebuilds it the same way and warns when it differs.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

GGUF_VERSION = 3
ALIGNMENT = 32
# GGUF metadata value types.
T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types.
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
TYPES = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16, "q8_0": GGML_Q8_0}
FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # general.file_type (llama_ftype)
QK8_0 = 32

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


# ---- reading the Hugging Face folder ----

def read_safetensors(path):
    """name -> float32 numpy array (F32, F16 and BF16 tensors; others are skipped)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = blob[base + begin:base + end]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue
        out[name] = a.reshape(e["shape"]).astype(np.float32)
    return out


def permute(w, n_head):
    """llama.cpp's q/k row permutation: HF rotate-half order -> interleaved pairs, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_tensors(cfg, st):
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_head
    parts = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    tied = cfg.get("tie_word_embeddings", False)
    out = [("token_embd.weight", st["model.embed_tokens.weight"])]
    for i in range(cfg["num_hidden_layers"]):
        for theirs, ours in parts.items():
            w = st[f"model.layers.{i}.{theirs}.weight"]
            if ours == "attn_q":
                w = permute(w, n_head)
            elif ours == "attn_k":
                w = permute(w, n_kv)
            out.append((f"blk.{i}.{ours}.weight", w))
    out.append(("output_norm.weight", st["model.norm.weight"]))
    if not tied:
        out.append(("output.weight", st["lm_head.weight"]))
    return out


def gpt2_tensors(cfg, st):
    p = "transformer." if "transformer.wte.weight" in st else ""
    parts = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    out = [("token_embd.weight", st[p + "wte.weight"]), ("position_embd.weight", st[p + "wpe.weight"])]
    for i in range(cfg["n_layer"]):
        for theirs, ours in parts.items():
            for leaf in ("weight", "bias"):
                a = st[f"{p}h.{i}.{theirs}.{leaf}"]
                if leaf == "weight" and "." in theirs:  # Conv1D [in, out] -> [out, in], as llama.cpp does
                    a = a.T
                out.append((f"blk.{i}.{ours}.{leaf}", a))
    out += [("output_norm.weight", st[p + "ln_f.weight"]), ("output_norm.bias", st[p + "ln_f.bias"])]
    if not cfg.get("tie_word_embeddings", True):
        out.append(("output.weight", st["lm_head.weight"]))
    return out


def metadata(cfg):
    arch = cfg["architectures"][0]
    if arch == "LlamaForCausalLM":
        n_head = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
        kv = [("general.architecture", T_STRING, "llama"),
              ("llama.vocab_size", T_U32, cfg["vocab_size"]),
              ("llama.context_length", T_U32, cfg["max_position_embeddings"]),
              ("llama.embedding_length", T_U32, cfg["hidden_size"]),
              ("llama.block_count", T_U32, cfg["num_hidden_layers"]),
              ("llama.feed_forward_length", T_U32, cfg["intermediate_size"]),
              ("llama.rope.dimension_count", T_U32, head_dim),
              ("llama.attention.head_count", T_U32, n_head),
              ("llama.attention.head_count_kv", T_U32, cfg.get("num_key_value_heads") or n_head),
              ("llama.attention.layer_norm_rms_epsilon", T_F32, cfg.get("rms_norm_eps", 1e-6)),
              ("llama.rope.freq_base", T_F32, cfg.get("rope_theta", 10000.0))]
        if head_dim * n_head != cfg["hidden_size"]:
            kv += [("llama.attention.key_length", T_U32, head_dim), ("llama.attention.value_length", T_U32, head_dim)]
        if cfg.get("rope_scaling"):
            sys.exit("gguf_writer: rope_scaling is not written (sqrtdk does not run it)")
        return "llama", kv
    if arch in ("GPT2LMHeadModel", "GPT2Model"):
        d = cfg["n_embd"]
        return "gpt2", [("general.architecture", T_STRING, "gpt2"),
                        ("gpt2.context_length", T_U32, cfg.get("n_positions") or cfg["n_ctx"]),
                        ("gpt2.embedding_length", T_U32, d),
                        ("gpt2.feed_forward_length", T_U32, cfg.get("n_inner") or 4 * d),
                        ("gpt2.block_count", T_U32, cfg["n_layer"]),
                        ("gpt2.attention.head_count", T_U32, cfg["n_head"]),
                        ("gpt2.attention.layer_norm_epsilon", T_F32, cfg.get("layer_norm_epsilon", 1e-5))]
    sys.exit(f"gguf_writer: architecture {arch!r} is not written (LlamaForCausalLM or GPT2LMHeadModel)")


# ---- tensor data ----

def roundf(v):
    """C's roundf on a float32 array: halves away from zero (exact: a - floor(a) is exact for |a| < 2^23)."""
    a = np.abs(v)
    f = np.floor(a)
    return np.copysign(f + (a - f >= np.float32(0.5)), v)


def quantize_q8_0(x):
    """ggml's quantize_row_q8_0_ref, in float32 as the C code computes it, per block of 32:
    amax = max |x|; d = amax / 127; id = d ? 1/d : 0; q = roundf(x * id); stored: d as f16, then q as int8."""
    blocks = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK8_0)
    amax = np.abs(blocks).max(axis=1)
    d = amax / np.float32(127)
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)
    q = roundf(blocks * inv[:, None]).astype(np.int8)
    out = np.empty((blocks.shape[0], 2 + QK8_0), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def f32_to_bf16_bits(a):
    x = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    return ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype("<u2")


def encode(a, kind):
    """(ggml type, bytes) of a tensor stored as `kind` (1-D tensors stay F32, as llama.cpp keeps them)."""
    if a.ndim == 1 or kind == "f32":
        return GGML_F32, np.ascontiguousarray(a, "<f4").tobytes()
    if kind == "q8_0" and a.shape[-1] % QK8_0 == 0:
        return GGML_Q8_0, quantize_q8_0(a)
    if kind == "bf16":
        return GGML_BF16, f32_to_bf16_bits(a).tobytes()
    return GGML_F16, np.ascontiguousarray(a, "<f2").tobytes()


# ---- tokenizer ----

def gpt2_files_tokenizer(vocab_path, merges_path):
    """GPT-2's vocab.json + merges.txt (or encoder.json + vocab.bpe) as the tokenizer.json Hugging Face makes of them
    (the construction of tools/tokenizer_fixtures/make_fixtures.js): BPE model, ByteLevel pre-tokenizer with GPT-2's
    regex and no prefix space, <|endoftext|> a special added token."""
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n") if line and not line.startswith("#version")]
    added = [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "special": True}] if "<|endoftext|>" in vocab else []
    return {"added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "model": {"type": "BPE", "vocab": vocab, "merges": merges}}


def read_tokenizer(path):
    """(tokenizer.json contents, tokenizer_config.json contents or {}) from a tokenizer.json, GPT-2's vocab.json /
    encoder.json (its merges.txt / vocab.bpe beside it), or a folder holding either. GPT-2's files have no config:
    bos and eos are <|endoftext|>, as Hugging Face's GPT2Tokenizer defaults (and llama.cpp writes), and no BOS is
    added."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    at = lambda name: os.path.join(folder, name)
    if os.path.isdir(path):
        for name in ("tokenizer.json", "vocab.json", "encoder.json"):
            if os.path.exists(at(name)):
                path = at(name)
                break
        else:
            sys.exit(f"gguf_writer: {folder}: no tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe")
    base = os.path.basename(path)
    if base in ("vocab.json", "encoder.json"):
        merges = at("merges.txt" if base == "vocab.json" else "vocab.bpe")
        if not os.path.exists(merges):
            sys.exit(f"gguf_writer: {path}: {os.path.basename(merges)} is missing beside it")
        return gpt2_files_tokenizer(path, merges), {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                                    "add_bos_token": False}
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    config = {}
    if os.path.exists(at("tokenizer_config.json")):
        with open(at("tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    return tok, config


def tokenizer_metadata(path):
    tok, config = read_tokenizer(path)
    model = tok["model"]
    if model.get("type") != "BPE":
        sys.exit(f"gguf_writer: {path}: model type {model.get('type')!r} (expected BPE)")
    vocab = model["vocab"]
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    n = max(list(vocab.values()) + list(added)) + 1
    tokens = [None] * n
    for piece, i in vocab.items():
        tokens[i] = piece
    types = [1] * n
    for i, a in added.items():
        tokens[i] = a["content"]
        types[i] = 3 if a.get("special") else 4
    for i in range(n):
        if tokens[i] is None:
            tokens[i] = f"[PAD{i}]"
            types[i] = 5  # unused: an id no one uses
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    normalizer = json.dumps(tok.get("normalizer"))
    sentencepiece = bool(model.get("byte_fallback")) or "\u2581" in normalizer or "Metaspace" in json.dumps(tok.get("pre_tokenizer"))
    kv = []
    if sentencepiece:
        for i, t in enumerate(tokens):
            if types[i] == 1 and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                types[i] = 6
        if model.get("unk_token") in vocab:
            types[vocab[model["unk_token"]]] = 2
        scores = sentencepiece_scores(tokens, merges)
        rebuilt = sentencepiece_merges(tokens, scores)
        wanted = [tuple(m.split(" ", 1)) for m in merges]
        if [(tokens[a], tokens[b]) for a, b in rebuilt] != wanted:
            print(f"gguf_writer: warning: the merges rebuilt from scores differ from {path}'s "
                  f"({len(rebuilt)} vs {len(wanted)}): not the list SentencePieceExtractor makes", file=sys.stderr)
        kv += [("tokenizer.ggml.model", T_STRING, "llama"), ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
               ("tokenizer.ggml.scores", T_ARRAY, (T_F32, scores)),
               ("tokenizer.ggml.token_type", T_ARRAY, (T_I32, types))]
    else:
        pre = tok.get("pre_tokenizer") or {}
        text = json.dumps(pre)
        if json.dumps(LLAMA3_REGEX)[1:-1] in text:
            pre_name = "llama-bpe"
        elif json.dumps(QWEN2_REGEX)[1:-1] in text:
            pre_name = "qwen2"
        elif pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
            pre_name = "gpt-2"
        else:
            sys.exit(f"gguf_writer: {path}: pre-tokenizer not recognised (GPT-2's, Llama 3's or Qwen2's)")
        kv += [("tokenizer.ggml.model", T_STRING, "gpt2"), ("tokenizer.ggml.pre", T_STRING, pre_name),
               ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
               ("tokenizer.ggml.token_type", T_ARRAY, (T_I32, types)),
               ("tokenizer.ggml.merges", T_ARRAY, (T_STRING, merges))]
    ids = {t: i for i, t in enumerate(tokens)}
    for key, field in (("bos", "bos_token"), ("eos", "eos_token")):
        value = config.get(field)
        if isinstance(value, dict):
            value = value.get("content")
        if value in ids:
            kv.append((f"tokenizer.ggml.{key}_token_id", T_U32, ids[value]))
    for key in ("add_bos_token", "add_eos_token"):
        if isinstance(config.get(key), bool):
            kv.append((f"tokenizer.ggml.{key}", T_BOOL, config[key]))
    return kv


def sentencepiece_scores(tokens, merges):
    """Scores that make the extractor's construction give back `merges` (see the module docstring)."""
    first = {}
    for rank, m in enumerate(merges):
        first.setdefault(m.replace(" ", "", 1), rank)
    return [-float(first[t]) if t in first else -float(len(merges) + i) for i, t in enumerate(tokens)]


def sentencepiece_merges(tokens, scores):
    """The same construction as sqrtdk::sentencepiece_merges (Hugging Face's SentencePieceExtractor)."""
    index = {t: i for i, t in enumerate(tokens) if t}
    merges = []
    for i, piece in enumerate(tokens):
        local = [(index[piece[:k]], index[piece[k:]]) for k in range(1, len(piece))
                 if piece[:k] in index and piece[k:] in index]
        merges += [(l, r, np.float32(scores[i])) for l, r in sorted(local)]
    merges.sort(key=lambda m: -m[2])  # stable
    return [(l, r) for l, r, _ in merges]


# ---- the file ----

def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == T_STRING:
        return gguf_string(value)
    if vtype == T_ARRAY:
        etype, items = value
        out = struct.pack("<IQ", etype, len(items))
        if etype == T_STRING:
            return out + b"".join(gguf_string(s) for s in items)
        code = {T_U32: "<I", T_I32: "<i", T_F32: "<f"}[etype]
        return out + b"".join(struct.pack(code, x) for x in items)
    code = {T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[vtype]
    return struct.pack(code, value)


def write_gguf(path, kvs, tensors):
    """kvs: [(key, type, value)]; tensors: [(name, ggml type, shape outermost first, bytes)]."""
    align = lambda n: (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    head = b"GGUF" + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        head += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset, infos = 0, b""
    for name, gtype, shape, data in tensors:
        ne = list(reversed(shape))  # innermost first
        infos += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", gtype, offset)
        offset = align(offset + len(data))
    head += infos
    head += b"\0" * (align(len(head)) - len(head))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for _, _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * (align(len(data)) - len(data)))
    os.replace(tmp, path)


def write_fuzz_seeds(out):
    """Small valid files (tiny random models, both tokenizer kinds) and near-misses, for tests/fuzz/fuzz_gguf.cpp."""
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(16)
    w = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.1
    d, ff, vocab, ctx = 32, 32, 16, 8
    llama_cfg = {"architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "max_position_embeddings": ctx,
                 "hidden_size": d, "num_hidden_layers": 1, "intermediate_size": ff, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}
    llama_st = {"model.embed_tokens.weight": w(vocab, d), "model.norm.weight": w(d) + 1}
    for name, shape in (("input_layernorm", (d,)), ("self_attn.q_proj", (d, d)), ("self_attn.k_proj", (16, d)),
                        ("self_attn.v_proj", (16, d)), ("self_attn.o_proj", (d, d)),
                        ("post_attention_layernorm", (d,)), ("mlp.gate_proj", (ff, d)), ("mlp.up_proj", (ff, d)),
                        ("mlp.down_proj", (d, ff))):
        llama_st[f"model.layers.0.{name}.weight"] = w(*shape)
    gpt2_cfg = {"architectures": ["GPT2LMHeadModel"], "vocab_size": vocab, "n_positions": ctx, "n_embd": d,
                "n_layer": 1, "n_head": 2, "n_inner": ff, "layer_norm_epsilon": 1e-5}
    gpt2_st = {"wte.weight": w(vocab, d), "wpe.weight": w(ctx, d), "ln_f.weight": w(d), "ln_f.bias": w(d)}
    for name, shape in (("ln_1", (d,)), ("attn.c_attn", (d, 3 * d)), ("attn.c_proj", (d, d)), ("ln_2", (d,)),
                        ("mlp.c_fc", (d, ff)), ("mlp.c_proj", (ff, d))):
        gpt2_st[f"h.0.{name}.weight"] = w(*shape)
        gpt2_st[f"h.0.{name}.bias"] = w(shape[-1])
    spm = ["<unk>", "<s>", "</s>", "<0x0A>", "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"] + [f"x{i}" for i in range(6)]
    spm_kv = [("tokenizer.ggml.model", T_STRING, "llama"), ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, spm)),
              ("tokenizer.ggml.scores", T_ARRAY, (T_F32, [-float(i) for i in range(vocab)])),
              ("tokenizer.ggml.token_type", T_ARRAY, (T_I32, [2, 3, 3, 6] + [1] * 12)),
              ("tokenizer.ggml.bos_token_id", T_U32, 1), ("tokenizer.ggml.eos_token_id", T_U32, 2)]
    bpe = [chr(ord("a") + i) for i in range(13)] + ["ab", "abc", "<|endoftext|>"]
    bpe_kv = [("tokenizer.ggml.model", T_STRING, "gpt2"), ("tokenizer.ggml.pre", T_STRING, "llama-bpe"),
              ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, bpe)),
              ("tokenizer.ggml.token_type", T_ARRAY, (T_I32, [1] * 15 + [3])),
              ("tokenizer.ggml.merges", T_ARRAY, (T_STRING, ["a b", "ab c"])),
              ("tokenizer.ggml.eos_token_id", T_U32, 15), ("tokenizer.ggml.add_bos_token", T_BOOL, False)]
    seeds = {}
    for kind, tok in (("q8_0", spm_kv), ("f16", bpe_kv), ("bf16", [])):
        _, kvs = metadata(llama_cfg)
        tensors = [(n, *encode(a, kind), a) for n, a in llama_tensors(llama_cfg, llama_st)]
        path = os.path.join(out, f"llama_{kind}.gguf")
        write_gguf(path, kvs + tok, [(n, t, list(a.shape), data) for n, t, data, a in tensors])
        with open(path, "rb") as f:
            seeds[kind] = f.read()
    _, kvs = metadata(gpt2_cfg)
    gpt2 = [(n, *encode(a, "f32"), list(a.shape)) for n, a in gpt2_tensors(gpt2_cfg, gpt2_st)]
    write_gguf(os.path.join(out, "gpt2_f32.gguf"), kvs, [(n, t, shape, data) for n, t, data, shape in gpt2])
    g = seeds["q8_0"]
    broken = {"empty.gguf": b"", "magic_only.gguf": b"GGUF", "header_only.gguf": g[:24],
              "version1.gguf": g[:4] + struct.pack("<I", 1) + g[8:], "cut_in_metadata.gguf": g[:200],
              "cut_in_data.gguf": g[:len(g) - 5],
              "huge_n_kv.gguf": g[:16] + struct.pack("<Q", 1 << 60) + g[24:]}
    for name, blob in broken.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fuzz-seeds":
        write_fuzz_seeds(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(TYPES), default="f32", help="2-D tensor type (1-D tensors stay F32)")
    ap.add_argument("--tokenizer", help="a tokenizer.json, GPT-2's vocab.json / encoder.json, or a folder with one, "
                                        "to store as tokenizer.ggml.*")
    ap.add_argument("--name", help="general.name (default: the folder's name)")
    args = ap.parse_args()
    with open(os.path.join(args.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    arch, kvs = metadata(cfg)
    st = read_safetensors(os.path.join(args.hf_dir, "model.safetensors"))
    named = llama_tensors(cfg, st) if arch == "llama" else gpt2_tensors(cfg, st)
    kvs = kvs[:1] + [("general.name", T_STRING, args.name or os.path.basename(os.path.abspath(args.hf_dir))),
                     ("general.file_type", T_U32, FILE_TYPE[args.type])] + kvs[1:]
    if args.tokenizer:
        kvs += tokenizer_metadata(args.tokenizer)
    tensors = []
    for name, a in named:
        gtype, data = encode(a, args.type)
        tensors.append((name, gtype, list(a.shape), data))
    write_gguf(args.out, kvs, tensors)
    print(f"wrote {args.out}: {arch}, {len(tensors)} tensors, {args.type}, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
