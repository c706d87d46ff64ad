#!/usr/bin/python3
"""Golden text fixtures (issue 16): real tokenizers in front of random-weight models, against Hugging Face and PyTorch.

    cd tools/tokenizer_fixtures && npm ci && cd ../..     # npm tokenizers@0.23.2, the tokenizer reference
    /usr/bin/python3 tools/make_golden_text.py [--only gpt2_text|llama_text] [--node-modules DIR]

Writes tests/data/golden/{gpt2_text,llama_text}/, checked by tests/engine/test_golden_text.cpp:
  - gpt2_text:  GPT2LMHeadModel shape with GPT-2's real 50 257-piece vocabulary (tests/data/tokenizers/gpt2,
                encoder.json + vocab.bpe), d_model 64, 2 layers, 4 heads, max_seq 128, tied embeddings;
  - llama_text: LlamaForCausalLM shape with the real 32 000-piece Llama 2 SentencePiece BPE (tests/data/tokenizers/
                llama2), d_model 64, 2 layers, 4 heads over 2 kv heads, d_ff 160, untied lm_head, max_seq 128.
The weights are not stored: like the realistic fixture (tools/make_golden.py, llama_realistic) they come from the
counter-based generator `counter_uniform`, per Hugging Face tensor name and in Hugging Face layout, and fixture.json
holds each tensor's recipe and the CRC-32 of its f32 bytes; the C++ test regenerates them, writes config.json +
model.safetensors + the tokenizer files and converts the folder (and GGUF files made from it) with the engine.

TEXT (below) is one multilingual string. Its ids come from Hugging Face's tokenizer itself (npm tokenizers@0.23.2,
the Rust library, run through node here: encode with add_special_tokens = true; GPT-2's tokenizer.json is built
from encoder.json + vocab.bpe exactly as tools/tokenizer_fixtures/make_fixtures.js does). The logits are PyTorch's
float64 forward (tools/make_golden.py's gpt2_forward / llama_forward, sqrtdk's double-rounded-once RoPE tables) over
those ids, stored compactly (50k logits at ~110 positions would be 22 MB):
  argmax.npy        f32 [T]      the id of the largest logit per position (ids < 2^24: exact in f32)
  logsumexp.npy     f32 [T]      log sum_v exp(logit_v) per position (1-Lipschitz in max |error|: checks all V)
  top2_gap.npy      f32 [T]      largest minus second-largest logit per position
  last_logits.npy   f32 [V]      every logit of the last position
  sample_ids.npy    f32 [T, 64]  per position: the 8 largest logits' ids, then 56 more drawn by the counter generator
  sample_logits.npy f32 [T, 64]  their logits
"""

import argparse
import json
import pathlib
import subprocess
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_golden as mg  # noqa: E402  (the forward functions, the counter generator, hf_config)

REPO = mg.REPO
OUT_DIR = mg.OUT_DIR
TOKENIZERS = REPO / "tests" / "data" / "tokenizers"

# English with contractions and digits, French/German accents, Russian, Greek, Chinese, Japanese, Korean, Arabic,
# Hindi, an emoji and a ZWJ family sequence, then code with a tab, newlines and a double space. 118 GPT-2 tokens,
# 101 Llama 2 tokens (with <s>).
TEXT = ("It's 42°C; we'll pay $3.50 for café crème in Köln!\n"
        "Привет, мир! Γειά σου. 你好世界。日本語。한국어. مرحبا. नमस्ते 😀👨\u200d👩\u200d👧\n"
        "if x:\n\treturn  x * 2\n")

N_SAMPLE, N_TOP = 64, 8
TOL = 1e-4  # of max |logit|: the tiny golden fixtures' rule (issue 5), see TOL_WHY

MODELS = [
    dict(name="gpt2_text", arch="gpt2", d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=256,
         n_vocab=50257, max_seq=128, norm_eps=1e-5, rope_theta=0.0, tied_embeddings=True, rope_interleaved=False,
         hf_dtype="f32", seed=161, bos_id=50256, eos_id=50256,
         tokenizer=dict(dir="tokenizers/gpt2", files=["encoder.json", "vocab.bpe"], kind="byte-level BPE")),
    dict(name="llama_text", arch="llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=160,
         n_vocab=32000, max_seq=128, norm_eps=1e-5, rope_theta=10000.0, tied_embeddings=False,
         rope_interleaved=False, hf_dtype="f32", seed=162, bos_id=1, eos_id=2,
         tokenizer=dict(dir="tokenizers/llama2", files=["tokenizer.json", "tokenizer_config.json"],
                        kind="SentencePiece BPE")),
]


def recipe(cfg):
    """(Hugging Face name, shape in HF layout, offset, amp) per tensor, in save_pretrained's names. Values are
    offset + uniform(-amp, amp) (std amp/sqrt(3)); amps are small dyadics near sqrt(3/fan_in), so linear weights have
    std ~1/sqrt(fan_in) and activations stay of order 1: 7/32 for fan_in 64, 7/64 for 256, 9/64 for 160. GPT-2 (tied
    head, as the tiny gpt2 fixture): embedding std 0.29, block output projections x3; Llama: embedding std 1.01, q/k
    x1.5 so attention is neither uniform nor one-hot, lm_head x2 for logits of a few units. Norm weights 1 +- 0.19,
    biases +- 0.19."""
    D, F, V, T = cfg["d_model"], cfg["d_ff"], cfg["n_vocab"], cfg["max_seq"]
    lin = {64: 7 / 32, 256: 7 / 64, 160: 9 / 64}
    out = []
    if cfg["arch"] == "gpt2":
        out += [("transformer.wte.weight", [V, D], 0, 1 / 2), ("transformer.wpe.weight", [T, D], 0, 7 / 8)]
        for i in range(cfg["n_layers"]):
            h = f"transformer.h.{i}."
            out += [(h + "ln_1.weight", [D], 1, 3 / 16), (h + "ln_1.bias", [D], 0, 3 / 16),
                    (h + "attn.c_attn.weight", [D, 3 * D], 0, lin[D]), (h + "attn.c_attn.bias", [3 * D], 0, 3 / 16),
                    (h + "attn.c_proj.weight", [D, D], 0, 3 * lin[D]), (h + "attn.c_proj.bias", [D], 0, 3 / 16),
                    (h + "ln_2.weight", [D], 1, 3 / 16), (h + "ln_2.bias", [D], 0, 3 / 16),
                    (h + "mlp.c_fc.weight", [D, F], 0, lin[D]), (h + "mlp.c_fc.bias", [F], 0, 3 / 16),
                    (h + "mlp.c_proj.weight", [F, D], 0, 3 * lin[F]), (h + "mlp.c_proj.bias", [D], 0, 3 / 16)]
        out += [("transformer.ln_f.weight", [D], 1, 3 / 16), ("transformer.ln_f.bias", [D], 0, 3 / 16)]
        return out
    q_dim, kv_dim = cfg["n_heads"] * cfg["head_dim"], cfg["n_kv_heads"] * cfg["head_dim"]
    out += [("model.embed_tokens.weight", [V, D], 0, 7 / 4)]
    for i in range(cfg["n_layers"]):
        L = f"model.layers.{i}."
        out += [(L + "input_layernorm.weight", [D], 1, 3 / 16),
                (L + "self_attn.q_proj.weight", [q_dim, D], 0, 1.5 * lin[D]),
                (L + "self_attn.k_proj.weight", [kv_dim, D], 0, 1.5 * lin[D]),
                (L + "self_attn.v_proj.weight", [kv_dim, D], 0, lin[D]),
                (L + "self_attn.o_proj.weight", [D, q_dim], 0, lin[q_dim]),
                (L + "post_attention_layernorm.weight", [D], 1, 3 / 16),
                (L + "mlp.gate_proj.weight", [F, D], 0, lin[D]), (L + "mlp.up_proj.weight", [F, D], 0, lin[D]),
                (L + "mlp.down_proj.weight", [D, F], 0, lin[F])]
    out += [("model.norm.weight", [D], 1, 3 / 16), ("lm_head.weight", [V, D], 0, 2 * lin[D])]
    return out


def weights(cfg):
    """{HF name: float32 torch tensor}, {HF name: CRC-32 of its little-endian f32 bytes}."""
    p, crc = {}, {}
    for name, shape, offset, amp in recipe(cfg):
        a = mg.counter_uniform(name, cfg["seed"], int(np.prod(shape)), offset, amp).reshape(shape)
        p[name] = torch.from_numpy(a)
        crc[name] = zlib.crc32(a.astype("<f4").tobytes())
    return p, crc


HF_ENCODE_JS = r"""
// Hugging Face tokenizers (npm tokenizers@0.23.2): encode argv text with add_special_tokens = true.
const fs = require("fs"), path = require("path");
const { Tokenizer } = require("tokenizers");
function gpt2TokenizerJson(dir) {  // tools/tokenizer_fixtures/make_fixtures.js's construction, verbatim
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
  const merges = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n")
    .filter((l) => l.length > 0 && !l.startsWith("#version"));
  return JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
                     normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
             fuse_unk: false, byte_fallback: false, vocab, merges },
  });
}
(async () => {
  const [dir, text] = [process.argv[process.argv.length - 1], fs.readFileSync(0, "utf8")];
  const tok = fs.existsSync(path.join(dir, "tokenizer.json")) ? Tokenizer.fromFile(path.join(dir, "tokenizer.json"))
                                                               : Tokenizer.fromString(gpt2TokenizerJson(dir));
  const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
  const version = require("tokenizers/package.json").version;
  console.log(JSON.stringify({ ids, decoded_skip_special: await tok.decode(ids, true), version }));
})();
"""


def hf_encode(tokenizer_dir, node_modules):
    env = {"NODE_PATH": str(node_modules), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(["node", "-e", HF_ENCODE_JS, str(tokenizer_dir)], input=TEXT.encode(), env=env,
                       capture_output=True)
    if r.returncode != 0:
        sys.exit(f"make_golden_text: node failed (is npm tokenizers@0.23.2 in {node_modules}?):\n{r.stderr.decode()}")
    out = json.loads(r.stdout)
    assert out["version"] == "0.23.2", out["version"]
    assert out["decoded_skip_special"] == TEXT
    return out["ids"]


def hf_config(cfg):
    c = mg.hf_config(cfg)
    c.update(bos_token_id=cfg["bos_id"], eos_token_id=cfg["eos_id"])
    return c


TOL_WHY = (
    "The tiny golden fixtures' rule (tests/data/golden/README.md, issue 5): max |sqrtdk - PyTorch| <= 1e-4 x max "
    "|logit| over every stored logit (max |logit| taken over all positions and all {V} ids: {scale:.3f}), so the bound "
    "is {bound:.3e}. These bodies are as tiny as those fixtures' (d_model 64, 2 layers), only the vocabulary is real. "
    "The reference is float64 (as llama_realistic's), so what separates a correct float32 engine from it is float32 "
    "rounding alone: PyTorch's own float32 forward differs by {f32:.2e} ({f32r:.1e} of max |logit|){rope}; the bound "
    "is {ratio:.0f}x the largest. logsumexp is 1-Lipschitz in the max norm, so it gets the same bound and checks all "
    "{V} logits of each position. Argmax: compared exactly at positions whose top-2 gap exceeds 2 x bound ({n_clear} "
    "of {T}; smallest gap {min_gap:.2e}): an engine within the bound cannot flip those.")


def build(cfg, node_modules):
    p, crc = weights(cfg)
    tok_dir = REPO / "tests" / "data" / cfg["tokenizer"]["dir"]
    ids = hf_encode(tok_dir, node_modules)
    assert len(ids) <= cfg["max_seq"], len(ids)
    kw = {} if cfg["arch"] == "gpt2" else {"rope_tables": "f64"}
    logits = mg.forward(mg.to64(p), cfg, ids, **kw)  # float64 [T, V]: the reference
    logits32 = mg.forward(p, cfg, ids, **kw)  # PyTorch float32: the scale of float32 rounding
    scale = float(logits.abs().max())
    f32 = float((logits32.double() - logits).abs().max())
    figures = {"max_abs_logit": scale, "logit_std": float(logits.std()), "pytorch_f32_vs_f64_max_abs": f32}
    rope = ""
    if cfg["arch"] == "llama":
        hf_rope = float((mg.forward(mg.to64(p), cfg, ids, rope_tables="hf") - logits).abs().max())
        figures["hf_f32_rope_tables_vs_f64_max_abs"] = hf_rope
        rope = f", Hugging Face's float32 RoPE tables {hf_rope:.2e}"
    bound = TOL * scale

    T, V = logits.shape
    top = torch.topk(logits, 2, dim=-1)
    argmax = top.indices[:, 0]
    gap = (top.values[:, 0] - top.values[:, 1]).numpy()
    lse = torch.logsumexp(logits, dim=-1).numpy()
    sample = np.zeros((T, N_SAMPLE), dtype=np.int64)
    for t in range(T):
        chosen = torch.topk(logits[t], N_TOP).indices.tolist()
        bits = mg.counter_bits(f"sample.{t}", cfg["seed"], 4 * N_SAMPLE) >> np.uint64(40)
        for b in bits:
            if len(chosen) == N_SAMPLE:
                break
            v = int(b % np.uint64(V))
            if v not in chosen:
                chosen.append(v)
        assert len(chosen) == N_SAMPLE
        sample[t] = chosen
    sample_logits = np.take_along_axis(logits.numpy(), sample, axis=1)
    figures["min_top2_gap"] = float(gap.min())
    figures["positions_argmax_exact"] = int((gap > 2 * bound).sum())

    out = OUT_DIR / cfg["name"]
    out.mkdir(parents=True, exist_ok=True)
    f32a = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    assert V < 2**24
    files = {"argmax": argmax.numpy(), "logsumexp": lse, "top2_gap": gap, "last_logits": logits[-1].numpy(),
             "sample_ids": sample, "sample_logits": sample_logits}
    for name, a in files.items():
        np.save(out / f"{name}.npy", f32a(a))
    fixture = {
        "name": cfg["name"],
        "kind": "generated_weights",
        "config": mg.sqdk_config(cfg) | {"bos_id": cfg["bos_id"], "eos_id": cfg["eos_id"]},
        "hf_config": hf_config(cfg),
        "tokenizer": cfg["tokenizer"],
        "text": TEXT,
        "ids": ids,
        "ids_reference": (f"npm tokenizers@0.23.2 (Hugging Face tokenizers, Rust), encode(text, "
                          f"add_special_tokens=true); decode(ids, skip_special_tokens=true) == text"),
        "weights": {
            "generator": ("Not stored: tools/make_golden.py's counter_uniform (see llama_realistic's fixture.json), "
                          "per Hugging Face tensor name and in Hugging Face layout (GPT-2 Conv1D weights [in, out]), "
                          "float32; crc32 = zlib CRC-32 of the little-endian f32 values."),
            "why_not_stored": "the real vocabularies make the embeddings 12.9 MB (gpt2) and 16.4 MB (llama) in f32",
            "seed": cfg["seed"],
            "tensors": {name: {"shape": shape, "offset": offset, "amp": amp, "crc32": crc[name]}
                        for name, shape, offset, amp in recipe(cfg)},
        },
        "files": {
            "argmax": "argmax.npy", "logsumexp": "logsumexp.npy", "top2_gap": "top2_gap.npy",
            "last_logits": "last_logits.npy", "sample_ids": "sample_ids.npy", "sample_logits": "sample_logits.npy",
            "notes": ("PyTorch float64 forward over `ids` (tools/make_golden.py gpt2_forward / llama_forward), "
                      "rounded to f32; row t = after ids[0..t]. sample_ids per position: the 8 largest logits' ids, "
                      "then ids (counter_bits('sample.<t>', seed) >> 40) mod n_vocab, skipping repeats, to 64; "
                      "stored as f32 (exact below 2^24)."),
        },
        "figures": figures,
        "tolerance": {
            "logits_max_abs_over_max_abs_logit": TOL,
            "logits_max_abs": bound,
            "why": TOL_WHY.format(V=V, T=T, scale=scale, bound=bound, f32=f32, f32r=f32 / scale, rope=rope,
                                  ratio=bound / max(f32, figures.get("hf_f32_rope_tables_vs_f64_max_abs", 0)),
                                  n_clear=figures["positions_argmax_exact"], min_gap=float(gap.min())),
        },
    }
    (out / "fixture.json").write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
    return fixture


def main():
    names = [cfg["name"] for cfg in MODELS]
    ap = argparse.ArgumentParser(description="Writes tests/data/golden/{gpt2_text,llama_text}/.")
    ap.add_argument("--only", action="append", choices=names)
    ap.add_argument("--node-modules", default=str(REPO / "tools" / "tokenizer_fixtures" / "node_modules"),
                    help="a node_modules folder holding npm tokenizers@0.23.2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for cfg in MODELS:
        if args.only and cfg["name"] not in args.only:
            continue
        fixture = build(cfg, args.node_modules)
        size = sum(f.stat().st_size for f in (OUT_DIR / cfg["name"]).rglob("*") if f.is_file())
        f = fixture["figures"]
        print(f"{cfg['name']:11s} {size / 1024:7.1f} KiB  {len(fixture['ids'])} ids  max|logit| "
              f"{f['max_abs_logit']:.3f}  f32-f64 {f['pytorch_f32_vs_f64_max_abs']:.2e}  bound "
              f"{fixture['tolerance']['logits_max_abs']:.2e}  argmax exact at {f['positions_argmax_exact']}"
              f"/{len(fixture['ids'])}")


if __name__ == "__main__":
    main()
