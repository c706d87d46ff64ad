#!/usr/bin/python3
"""Writes a random-weight Hugging Face checkpoint folder with a real tokenizer, so the README's commands run without
a network or a download. Numpy only.

    /usr/bin/python3 tools/make_hf_example.py --arch gpt2  --tokenizer tests/data/tokenizers/gpt2   -o /tmp/gpt2-example
    /usr/bin/python3 tools/make_hf_example.py --arch llama --tokenizer tests/data/tokenizers/llama2 -o /tmp/llama-example

The folder holds what `sqrtdk convert` reads from a real checkpoint:
  - config.json: GPT2LMHeadModel or LlamaForCausalLM with Hugging Face field names, a tiny body (d_model 64,
    2 layers, 4 heads; Llama: 2 kv heads, d_ff 160, untied lm_head; GPT-2: tied, as GPT-2 is) and the tokenizer's
    vocabulary size and BOS/EOS ids;
  - model.safetensors: f32 weights drawn from a seeded normal distribution (linear weights N(0, 1/fan_in)), under
    the names and layouts save_pretrained writes (GPT-2's Conv1D weights [in, out]);
  - the tokenizer files, copied: tokenizer.json + tokenizer_config.json, or GPT-2's encoder.json + vocab.bpe
    (or vocab.json + merges.txt). With a tokenizer.json, --chat-template NAME puts
    tests/data/chat/templates/NAME.jinja into tokenizer_config.json's chat_template (default for --arch llama:
    llama2, Llama 2 chat's template, which fits the Llama 2 tokenizer), so `sqrtdk generate --chat` works.
The weights are random: the text it generates is noise, but every step from text to tokens to logits and back is
the real one.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(REPO, "tests", "data", "chat", "templates")


def tokenizer_files(folder):
    """(files to copy, vocabulary size, bos id, eos id) of a tokenizer folder."""
    at = lambda name: os.path.join(folder, name)
    if os.path.exists(at("tokenizer.json")):
        with open(at("tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        config = {}
        if os.path.exists(at("tokenizer_config.json")):
            with open(at("tokenizer_config.json"), encoding="utf-8") as f:
                config = json.load(f)
        ids = dict(tok["model"]["vocab"])
        ids.update({a["content"]: a["id"] for a in tok.get("added_tokens", [])})

        def token_id(field):
            value = config.get(field)
            return ids.get(value.get("content") if isinstance(value, dict) else value)

        files = ["tokenizer.json"] + (["tokenizer_config.json"] if config else [])
        return files, max(ids.values()) + 1, token_id("bos_token"), token_id("eos_token")
    for vocab, merges in (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe")):
        if os.path.exists(at(vocab)) and os.path.exists(at(merges)):
            with open(at(vocab), encoding="utf-8") as f:
                ids = json.load(f)
            eot = ids.get("<|endoftext|>")
            return [vocab, merges], max(ids.values()) + 1, eot, eot
    sys.exit(f"make_hf_example: {folder}: no tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe")


def gpt2(n_vocab, rng, d=64, n_layers=2, n_heads=4, n_ctx=128):
    lin = lambda n_in, n_out, gain=1.0: gain * rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
    vec = lambda n, mean=0.0: mean + 0.1 * rng.standard_normal(n)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": n_vocab, "n_positions": n_ctx,
              "n_ctx": n_ctx, "n_embd": d, "n_layer": n_layers, "n_head": n_heads, "n_inner": None,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
              "torch_dtype": "float32"}
    p = {"transformer.wte.weight": 0.3 * rng.standard_normal((n_vocab, d)),
         "transformer.wpe.weight": 0.5 * rng.standard_normal((n_ctx, d))}
    for i in range(n_layers):
        h = f"transformer.h.{i}."
        p[h + "ln_1.weight"], p[h + "ln_1.bias"] = vec(d, 1.0), vec(d)
        p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"] = lin(d, 3 * d), vec(3 * d)
        p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"] = lin(d, d, 3.0), vec(d)
        p[h + "ln_2.weight"], p[h + "ln_2.bias"] = vec(d, 1.0), vec(d)
        p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"] = lin(d, 4 * d), vec(4 * d)
        p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"] = lin(4 * d, d, 3.0), vec(d)
    p["transformer.ln_f.weight"], p["transformer.ln_f.bias"] = vec(d, 1.0), vec(d)
    return config, p


def llama(n_vocab, rng, d=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=160, n_ctx=128):
    hd = d // n_heads
    lin = lambda n_out, n_in, gain=1.0: gain * rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)
    norm = lambda n: 1.0 + 0.1 * rng.standard_normal(n)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": n_vocab, "hidden_size": d,
              "intermediate_size": d_ff, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
              "num_key_value_heads": n_kv_heads, "head_dim": hd, "max_position_embeddings": n_ctx,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu",
              "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "torch_dtype": "float32"}
    p = {"model.embed_tokens.weight": rng.standard_normal((n_vocab, d))}
    for i in range(n_layers):
        L = f"model.layers.{i}."
        p[L + "input_layernorm.weight"] = norm(d)
        p[L + "self_attn.q_proj.weight"] = lin(n_heads * hd, d, 1.5)
        p[L + "self_attn.k_proj.weight"] = lin(n_kv_heads * hd, d, 1.5)
        p[L + "self_attn.v_proj.weight"] = lin(n_kv_heads * hd, d)
        p[L + "self_attn.o_proj.weight"] = lin(d, n_heads * hd)
        p[L + "post_attention_layernorm.weight"] = norm(d)
        p[L + "mlp.gate_proj.weight"] = lin(d_ff, d)
        p[L + "mlp.up_proj.weight"] = lin(d_ff, d)
        p[L + "mlp.down_proj.weight"] = lin(d, d_ff)
    p["model.norm.weight"] = norm(d)
    p["lm_head.weight"] = lin(n_vocab, d, 2.0)
    return config, p


def write_safetensors(path, tensors):
    """u64 LE header length, the JSON header padded with spaces to a multiple of 8, then the f32 data."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        blob = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--tokenizer", required=True, help="a tokenizer folder, e.g. tests/data/tokenizers/gpt2")
    ap.add_argument("-o", "--out", required=True, help="the folder to write")
    ap.add_argument("--chat-template", help="NAME of tests/data/chat/templates/NAME.jinja, or none "
                                            "(default: llama2 for --arch llama, none for gpt2)")
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args()
    files, n_vocab, bos, eos = tokenizer_files(args.tokenizer)
    template = args.chat_template or ("llama2" if args.arch == "llama" else "none")
    if template != "none" and "tokenizer.json" not in files:
        sys.exit("make_hf_example: a chat template goes into tokenizer_config.json, which only a tokenizer.json "
                 f"folder has ({args.tokenizer} has {', '.join(files)})")

    rng = np.random.default_rng(args.seed)
    config, p = (gpt2 if args.arch == "gpt2" else llama)(n_vocab, rng)
    config.update(bos_token_id=bos, eos_token_id=eos)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(args.out, "model.safetensors"), p)
    for name in files:
        shutil.copyfile(os.path.join(args.tokenizer, name), os.path.join(args.out, name))
    if template != "none":
        path = os.path.join(args.out, "tokenizer_config.json")
        tok_config = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                tok_config = json.load(f)
        with open(os.path.join(TEMPLATES, template + ".jinja"), encoding="utf-8") as f:
            tok_config["chat_template"] = f.read()
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tok_config, f, indent=2, ensure_ascii=False)
            f.write("\n")
    n_params = sum(a.size for a in p.values())
    print(f"wrote {args.out}: {config['architectures'][0]}, {n_params / 1e6:.1f} M random f32 weights, "
          f"{n_vocab} tokens ({', '.join(files)}), chat template {template}")


if __name__ == "__main__":
    main()
