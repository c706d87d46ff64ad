// The gpt2 family (Hugging Face GPT2LMHeadModel math): learned positions, pre-LayerNorm with bias, fused QKV,
// GELU (tanh form), biases on every linear, tied output head.
//
// One block over n tokens at positions pos0 .. pos0 + n - 1, x the residual stream [n, d_model]:
//   xb  = layer_norm(x) * ln1_w + ln1_b
//   qkv = xb · Wqkvᵀ + b_qkv                 q | k | v, each [n, d_model]
//   att = softmax(s·q·kᵀ + causal) · v       per head, k and v through the cache; s = 1/√hd or attention_scale
//   x  += att · Woᵀ + b_o                    bias and residual fused into the GEMM
//   xb  = layer_norm(x) * ln2_w + ln2_b
//   hb  = gelu(xb · Wupᵀ + b_up)             bias and GELU fused into the GEMM
//   x  += hb · Wdownᵀ + b_down
// Input: x = tok_emb[token] + pos_emb[pos]. After the last block: xb = layer_norm(x), logits = xb · tok_embᵀ (the
// last block runs past its KV store for each sequence's last row alone when only their logits are wanted:
// ForwardState::last_rows_only).
// The family's tensors, config rules, weight plan and Hugging Face names: models/gpt2/gpt2_family.cpp.
#include "models/gpt2/gpt2.h"
#include "ops/norm/norm.h"

namespace sqrtdk {

void gpt2_forward(ForwardState& s, const uint32_t* tokens, size_t n, size_t pos0) {
  const ModelWeights& m = *s.m;
  const ModelConfig& c = m.config;
  const size_t d = c.d_model, d_ff = c.d_ff, qkv_w = m.qkv_width();
  const Isa isa = m.isa;
  float* x = s.x.data();
  float* xb = s.xb.data();

  const double rows_bytes = 1.0 * n * d * sizeof(float);  // one [n, d] array of activations
  // The token and position tables' rows stream; x, written, is resident.
  run_op(s, "embedding", -1, n, 1.0 * n * d, 3 * rows_bytes, rows_bytes, [&] {
    for_each_sequence(s, n, pos0, [&](const SequenceRows& seq) {
      for (size_t t = seq.row0; t < seq.row0 + seq.n; ++t) {
        const float* te = m.tok_emb + size_t{tokens[t]} * d;
        const float* pe = m.pos_emb.data() + (seq.pos0 + t - seq.row0) * d;
        for (size_t i = 0; i < d; ++i) x[t * d + i] = te[i] + pe[i];
      }
    });
  });

  size_t nr = n;  // rows past each block's attention (gather_block_rows)
  for (size_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers[l];
    const int layer = static_cast<int>(l);

    run_op(s, "attn_norm", layer, n, 7.0 * n * d, 2 * rows_bytes, 2 * rows_bytes, [&] {
      ops::layer_norm(isa, x, n, d, d, w.attn_norm_weight.data(), w.attn_norm_bias.data(), c.norm_eps, xb, d,
                      s.n_threads);
    });
    ops::GemmEpilogue bias;
    bias.bias = w.attn_qkv.bias_or_null();
    run_linear(s, "attn_qkv", layer, w.attn_qkv, xb, n, d, s.qkv.data(), qkv_w, bias);
    run_attention(s, layer, n, pos0);
    // From here rows [0, nr): all n, or each sequence's last one in the last block (gather_block_rows).
    nr = gather_block_rows(s, l, n);
    const double out_bytes = 1.0 * nr * d * sizeof(float);
    ops::GemmEpilogue out;
    out.bias = w.attn_out.bias_or_null();
    out.residual = x;
    out.ld_residual = d;
    run_linear(s, "attn_out", layer, w.attn_out, s.att.data(), nr, c.n_heads * c.head_dim, x, d, out);

    run_op(s, "ffn_norm", layer, nr, 7.0 * nr * d, 2 * out_bytes, 2 * out_bytes, [&] {
      ops::layer_norm(isa, x, nr, d, d, w.ffn_norm_weight.data(), w.ffn_norm_bias.data(), c.norm_eps, xb, d,
                      s.n_threads);
    });
    ops::GemmEpilogue up;
    up.bias = w.ffn_up.bias_or_null();
    up.activation = ops::Activation::gelu_tanh;
    run_linear(s, "ffn_up", layer, w.ffn_up, xb, nr, d, s.hb.data(), d_ff, up);
    ops::GemmEpilogue down;
    down.bias = w.ffn_down.bias_or_null();
    down.residual = x;
    down.ld_residual = d;
    run_linear(s, "ffn_down", layer, w.ffn_down, s.hb.data(), nr, d_ff, x, d, down);
  }

  // The rows the last block computed (run_lm_head reads those).
  const double out_bytes = 1.0 * nr * d * sizeof(float);
  run_op(s, "out_norm", -1, nr, 7.0 * nr * d, 2 * out_bytes, 2 * out_bytes, [&] {
    ops::layer_norm(isa, x, nr, d, d, m.out_norm_weight.data(), m.out_norm_bias.data(), c.norm_eps, xb, d,
                    s.n_threads);
  });
}

}  // namespace sqrtdk
