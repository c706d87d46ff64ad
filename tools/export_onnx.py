#!/usr/bin/python3
"""Export a Llama-family .sqdk model to ONNX, for ONNX Runtime as a benchmark peer (perf/ort_peer.py).

    export_onnx.py MODEL.sqdk OUT.onnx [--ops onnx23|contrib|basic] [--with-past]

The graph is a prefill: input_ids int64 [1, T] (T dynamic) -> logits float32 [1, n_vocab] of the last position,
the same work as `sqrtdk bench`'s prefill (which also computes only the last row's logits). With --with-past (the
contrib form) it also takes and returns the KV cache, so it decodes: `sqrtdk bench`'s decode steps. Weights are float32
(f16/bf16/q8 tensors are widened as tools/sqdk.py reads them).

Three forms of the same math, so the peer can be given whichever ONNX Runtime runs fastest:
  onnx23   ONNX opset 23's fused operators: RMSNormalization, RotaryEmbedding and Attention (is_causal), which ONNX
           Runtime implements as single CPU kernels.
  contrib  ONNX Runtime's own fused operators (com.microsoft), as its generative-AI model builder emits for a Llama
           on CPU: SkipSimplifiedLayerNormalization (residual add + norm) and GroupQueryAttention on the packed QKV,
           RoPE inside (do_rotary), no past.
  basic    opset 17 primitives, as torch.onnx exports Hugging Face's Llama (Pow/ReduceMean/Sqrt/Div RMSNorm, which
           ONNX Runtime's optimizer fuses; MatMul + Softmax attention with an additive causal mask).
All: Q, K and V in one MatMul (N = (H + 2·KV)·hd) and gate and up in one (as ONNX Runtime's own model builder
does), weights stored transposed ([K, N]) so MatMul needs no Transpose; the tied output head is a Gemm with
transB = 1 over the embedding table itself, so the 98 MB table is stored once.

Standard library + numpy + python3-onnx (Debian's 1.12, which only serializes: opset 23's operators are checked by
ONNX Runtime when it loads the file, not here). GPT-2 is not exported (the issue-19 figures are on the Llama).
"""
import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sqdk import read_sqdk  # noqa: E402

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # named, so the user knows which package
    sys.exit("export_onnx.py: needs the onnx Python package: apt-get install python3-onnx")


class Graph:
    """Nodes and initializers, with unique value names."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint, array):
        n = self.name(hint)
        # np.asarray, not ascontiguousarray: that makes a scalar 1-d (the Gather of the last row would keep its axis)
        self.inits.append(numpy_helper.from_array(np.asarray(array, order="C"), n))
        return n

    def op(self, op_type, inputs, hint=None, n_out=1, domain=None, **attrs):
        outs = [self.name(hint or op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs


def rope_tables(max_seq, rotary_dim, theta):
    """cos, sin [max_seq, rotary_dim/2] of pos·θ^(-2i/d), in float64 then rounded, as the engine's tables."""
    inv = theta ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.outer(np.arange(max_seq, dtype=np.float64), inv)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def build(cfg, weights, ops, with_past=False):
    H, KV, hd = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    eps, V = float(cfg["norm_eps"]), cfg["n_vocab"]
    scale = cfg.get("attention_scale") or 1.0 / np.sqrt(hd)
    interleaved = bool(cfg["rope_interleaved"])
    g = Graph()
    i64 = lambda hint, values: g.const(hint, np.array(values, dtype=np.int64))

    tok_emb = g.const("tok_emb", weights["tok_emb"])
    x = g.op("Gather", [tok_emb, "input_ids"], "x", axis=0)  # [1, T, D]
    seq = g.op("Gather", [g.op("Shape", ["input_ids"]), i64("one", 1)], "T", axis=0)  # scalar T
    cos, sin = rope_tables(cfg["max_seq"], hd, float(cfg["rope_theta"]))
    cos_c, sin_c = g.const("cos", cos), g.const("sin", sin)
    if ops == "onnx23":
        pos = g.op("Unsqueeze", [g.op("Range", [i64("zero", 0), seq, i64("step", 1)]), i64("ax0", [0])], "pos")
    elif ops == "contrib":  # GroupQueryAttention's lengths: int32, seqlens_k = total - 1 per sequence
        length = seq
        if with_past:  # the keys before this call's tokens: past_key.0's [1, KV, P, hd]
            past = g.op("Gather", [g.op("Shape", ["past_key.0"]), i64("two", 2)], "P", axis=0)
            length = g.op("Add", [seq, past], "total")
        total = g.op("Cast", [length], "total_len", to=TensorProto.INT32)
        seqlens_k = g.op("Unsqueeze", [g.op("Sub", [total, g.const("one32", np.array(1, np.int32))]),
                                       i64("ax0", [0])], "seqlens_k")
    else:
        seq1 = g.op("Unsqueeze", [seq, i64("ax0", [0])])
        cos_t = g.op("Slice", [cos_c, i64("s0", [0]), seq1, i64("a0", [0])], "cos_t")  # [T, hd/2]
        sin_t = g.op("Slice", [sin_c, i64("s0", [0]), seq1, i64("a0", [0])], "sin_t")
        # Additive causal mask [T, T]: 0 on and below the diagonal, -inf above, cut from a max_seq table.
        full = np.triu(np.full((cfg["max_seq"], cfg["max_seq"]), -np.inf, dtype=np.float32), k=1)
        ends = g.op("Concat", [seq1, seq1], axis=0)
        mask = g.op("Slice", [g.const("causal", full), i64("s00", [0, 0]), ends, i64("a01", [0, 1])], "mask")

    def rms_norm(v, w):
        if ops == "onnx23":
            return g.op("RMSNormalization", [v, g.const("norm_w", w)], "norm", axis=-1, epsilon=eps)
        if ops == "contrib":
            return g.op("SimplifiedLayerNormalization", [v, g.const("norm_w", w)], "norm", axis=-1, epsilon=eps)
        ms = g.op("ReduceMean", [g.op("Pow", [v, g.const("two", np.array(2.0, np.float32))])], axes=[-1], keepdims=1)
        r = g.op("Sqrt", [g.op("Add", [ms, g.const("eps", np.array(eps, np.float32))])])
        return g.op("Mul", [g.const("norm_w", w), g.op("Div", [v, r])], "norm")

    def heads(v, n):  # [1, T, n·hd] -> [1, n, T, hd]
        return g.op("Transpose", [g.op("Reshape", [v, i64("shape", [1, -1, n, hd])])], perm=[0, 2, 1, 3])

    def rope_basic(v):  # [1, n, T, hd], the engine's pairs: (i, i + hd/2), or (2i, 2i + 1) when interleaved
        if interleaved:
            pairs = g.op("Reshape", [v, i64("shape", [0, 0, 0, hd // 2, 2])])
            x0, x1 = g.op("Split", [pairs, i64("halves", [1, 1])], n_out=2, axis=-1)
            x0 = g.op("Squeeze", [x0, i64("ax", [-1])])
            x1 = g.op("Squeeze", [x1, i64("ax", [-1])])
        else:
            x0, x1 = g.op("Split", [v, i64("halves", [hd // 2, hd // 2])], n_out=2, axis=-1)
        a = g.op("Sub", [g.op("Mul", [x0, cos_t]), g.op("Mul", [x1, sin_t])])
        b = g.op("Add", [g.op("Mul", [x1, cos_t]), g.op("Mul", [x0, sin_t])])
        if interleaved:
            ab = g.op("Concat", [g.op("Unsqueeze", [a, i64("ax", [-1])]), g.op("Unsqueeze", [b, i64("ax", [-1])])],
                      axis=-1)
            return g.op("Reshape", [ab, i64("shape", [0, 0, 0, hd])])
        return g.op("Concat", [a, b], axis=-1)

    pending = None  # a block's output not yet added to x: contrib adds it inside the next norm

    def add_and_norm(w):
        nonlocal x, pending
        if pending is not None and ops == "contrib":  # outputs: normed, mean, 1/std, input + skip
            normed, summed = g.name("norm"), g.name("x")
            g.nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [pending, x, g.const("norm_w", w)],
                                            [normed, "", "", summed], domain="com.microsoft", epsilon=eps))
            x, pending = summed, None
            return normed
        if pending is not None:
            x, pending = g.op("Add", [x, pending], "x"), None
        return rms_norm(x, w)

    for layer in range(cfg["n_layers"]):
        w = lambda name: weights[f"blk.{layer}.{name}"]
        a = add_and_norm(w("attn_norm.weight"))
        wqkv = np.concatenate([w("attn_q.weight"), w("attn_k.weight"), w("attn_v.weight")], axis=0).T
        qkv = g.op("MatMul", [a, g.const("w_qkv", wqkv)], "qkv")
        q, k, v = g.op("Split", [qkv, i64("qkv_split", [H * hd, KV * hd, KV * hd])], n_out=3, axis=-1)
        if ops == "onnx23":
            rot = dict(interleaved=int(interleaved))
            q = g.op("RotaryEmbedding", [q, cos_c, sin_c, pos], "q_rope", num_heads=H, **rot)
            k = g.op("RotaryEmbedding", [k, cos_c, sin_c, pos], "k_rope", num_heads=KV, **rot)
            o = g.op("Attention", [q, k, v], "attn", is_causal=1, q_num_heads=H, kv_num_heads=KV, scale=float(scale))
        elif ops == "contrib":  # packed QKV in, RoPE inside, no past; present K/V made as a KV cache would be
            past = [f"past_key.{layer}", f"past_value.{layer}"] if with_past else ["", ""]
            outs = [g.name("attn")] + ([f"present_key.{layer}", f"present_value.{layer}"] if with_past
                                       else [g.name("present_key"), g.name("present_value")])
            g.nodes.append(helper.make_node(
                "GroupQueryAttention", [qkv, "", ""] + past + [seqlens_k, total, cos_c, sin_c], outs,
                domain="com.microsoft", num_heads=H, kv_num_heads=KV, scale=float(scale), do_rotary=1,
                rotary_interleaved=int(interleaved)))
            o = outs[0]
        else:
            qh, kh, vh = rope_basic(heads(q, H)), rope_basic(heads(k, KV)), heads(v, KV)
            if KV != H:  # each K/V head serves H/KV query heads (Hugging Face's repeat_kv)
                rep = lambda t: g.op("Reshape", [g.op("Expand", [g.op("Unsqueeze", [t, i64("ax", [2])]),
                                                                 i64("rep", [1, KV, H // KV, 1, 1])]),
                                                 i64("shape", [1, H, -1, hd])])
                kh, vh = rep(kh), rep(vh)
            s = g.op("MatMul", [qh, g.op("Transpose", [kh], perm=[0, 1, 3, 2])], "scores")
            s = g.op("Add", [g.op("Mul", [s, g.const("scale", np.array(scale, np.float32))]), mask])
            o = g.op("MatMul", [g.op("Softmax", [s], axis=-1), vh])  # [1, H, T, hd]
            o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), i64("shape", [1, -1, H * hd])], "attn")
        pending = g.op("MatMul", [o, g.const("w_out", w("attn_out.weight").T)], "attn_out")
        m = add_and_norm(w("ffn_norm.weight"))
        wgu = np.concatenate([w("ffn_gate.weight"), w("ffn_up.weight")], axis=0).T
        gate, up = g.op("Split", [g.op("MatMul", [m, g.const("w_gate_up", wgu)]),
                                  i64("gu_split", [cfg["d_ff"], cfg["d_ff"]])], n_out=2, axis=-1)
        f = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up], "swiglu")
        pending = g.op("MatMul", [f, g.const("w_down", w("ffn_down.weight").T)], "ffn_out")

    x = g.op("Add", [x, pending], "x")
    last = g.op("Gather", [x, g.op("Sub", [seq, i64("one", 1)])], "last", axis=1)  # [1, D]
    last = rms_norm(last, weights["out_norm.weight"])
    head = tok_emb if cfg["tied_embeddings"] else g.const("lm_head", weights["lm_head.weight"])
    g.nodes.append(helper.make_node("Gemm", [last, head], ["logits"], transB=1))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "T"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, V])]
    for layer in range(cfg["n_layers"] if with_past else 0):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}.{layer}", TensorProto.FLOAT, [1, KV, "P", hd]))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}.{layer}", TensorProto.FLOAT,
                                                         [1, KV, "P_plus_T", hd]))
    graph = helper.make_graph(g.nodes, f"sqrtdk_llama_{ops}", inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", 23 if ops == "onnx23" else 17)]
    if ops == "contrib":
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="sqrtdk")
    model.ir_version = 10 if ops == "onnx23" else 8
    return model


def read_model(model_path, verify=True):
    """(config, {name: float32 array}) of a Llama .sqdk; SystemExit naming the file if it cannot be exported."""
    try:
        cfg, tensors = read_sqdk(model_path, verify=verify)
    except (OSError, ValueError, KeyError, struct.error) as e:  # missing, unreadable, truncated or not a .sqdk
        raise SystemExit(f"export_onnx.py: {model_path}: cannot read the model: {e}")
    if cfg["arch"] != "llama":
        raise SystemExit(f"export_onnx.py: {model_path}: arch '{cfg['arch']}': only llama models are exported")
    return cfg, {name: np.asarray(t, dtype=np.float32) for name, t, *_ in tensors}


def export(model_path, out_path, ops, with_past=False, model=None):
    """Writes the graph; model: read_model(model_path)'s result if the caller has it (several graphs, one read)."""
    cfg, weights = model or read_model(model_path)
    if with_past and ops != "contrib":
        raise SystemExit("export_onnx.py: --with-past needs --ops contrib (GroupQueryAttention keeps the KV cache)")
    model = build(cfg, weights, ops, with_past)
    # Over 2 GB the weights would have to go to external data; the models this serves are far smaller.
    if model.ByteSize() >= 2**31 - 1:
        raise SystemExit(f"export_onnx.py: {model_path}: over 2 GB of weights, not supported")
    tmp = out_path + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, out_path)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a Llama-family .sqdk file")
    p.add_argument("out", help="the .onnx file to write")
    p.add_argument("--ops", choices=["onnx23", "contrib", "basic"], default="onnx23",
                   help="onnx23: opset 23 fused RMSNormalization / RotaryEmbedding / Attention; contrib: ONNX "
                        "Runtime's own fused operators; basic: opset 17 primitives")
    p.add_argument("--with-past", action="store_true",
                   help="contrib only: KV cache inputs past_key.i / past_value.i [1, KV, P, hd] and outputs "
                        "present_key.i / present_value.i, for decoding one token at a time")
    args = p.parse_args(argv)
    export(args.model, args.out, args.ops, args.with_past)


if __name__ == "__main__":
    main(sys.argv[1:])
