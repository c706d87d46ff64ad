// The llama family (Hugging Face LlamaForCausalLM math): RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases.
//
// One block over n tokens at positions pos0 .. pos0 + n - 1, x the residual stream [n, d_model]:
//   xb   = rms_norm(x) * attn_norm
//   qkv  = xb · Wqkvᵀ                       q [n, n_heads·hd] | k, v [n, n_kv_heads·hd]
//   q, k = rope(q, k, pos)                  rotate pairs by pos·θ^(-2i/hd)
//   att  = softmax(s·q·kᵀ + causal) · v     per head, k and v through the cache; s = 1/√hd or attention_scale
//   x   += att · Woᵀ                        the residual add is fused into the GEMM
//   xb   = rms_norm(x) * ffn_norm
//   hb2  = silu(xb · Wgateᵀ)
//   hb   = (xb · Wupᵀ) * hb2                SwiGLU, the product fused into the up GEMM
//   x   += hb · Wdownᵀ
// After the last block: xb = rms_norm(x) * out_norm, logits = xb · lm_headᵀ. When only each sequence's last
// position's logits are wanted (ForwardState::last_rows_only), the last block stores every row's k and v but runs
// the rest for those rows alone.
// The family's tensors, config rules, weight plan and Hugging Face names: models/llama/llama_family.cpp.
#include "models/llama/llama.h"
#include "ops/activation/activation.h"
#include "ops/norm/norm.h"

namespace sqrtdk {

void llama_forward(ForwardState& s, const uint32_t* tokens, size_t n, size_t pos0) {
  const ModelWeights& m = *s.m;
  const ModelConfig& c = m.config;
  const size_t d = c.d_model, d_ff = c.d_ff, hd = c.head_dim, qkv_w = m.qkv_width();
  const Isa isa = m.isa;
  float* x = s.x.data();
  float* xb = s.xb.data();

  const double rows_bytes = 1.0 * n * d * sizeof(float);  // one [n, d] array of activations
  // The table's rows stream; x, written, is resident.
  run_op(s, "embedding", -1, n, 0, 2 * rows_bytes, rows_bytes, [&] {
    for (size_t t = 0; t < n; ++t) std::copy_n(m.tok_emb + size_t{tokens[t]} * d, d, x + t * d);
  });

  size_t nr = n;  // rows past each block's attention (gather_block_rows)
  for (size_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers[l];
    const int layer = static_cast<int>(l);

    run_op(s, "attn_norm", layer, n, 4.0 * n * d, 2 * rows_bytes, 2 * rows_bytes, [&] {
      ops::rms_norm(isa, x, n, d, d, w.attn_norm_weight.data(), c.norm_eps, xb, d, s.n_threads);
    });
    run_linear(s, "attn_qkv", layer, w.attn_qkv, xb, n, d, s.qkv.data(), qkv_w, {});
    run_rope_qk(s, layer, s.qkv.data(), n, qkv_w, pos0);
    run_attention(s, layer, n, pos0);
    // From here rows [0, nr): all n, or each sequence's last one in the last block (gather_block_rows).
    nr = gather_block_rows(s, l, n);
    const double out_bytes = 1.0 * nr * d * sizeof(float);
    ops::GemmEpilogue residual;
    residual.residual = x;
    residual.ld_residual = d;
    run_linear(s, "attn_out", layer, w.attn_out, s.att.data(), nr, c.n_heads * hd, x, d, residual);

    run_op(s, "ffn_norm", layer, nr, 4.0 * nr * d, 2 * out_bytes, 2 * out_bytes, [&] {
      ops::rms_norm(isa, x, nr, d, d, w.ffn_norm_weight.data(), c.norm_eps, xb, d, s.n_threads);
    });
    ops::GemmEpilogue gate;
    gate.activation = ops::Activation::silu;
    run_linear(s, "ffn_gate", layer, w.ffn_gate, xb, nr, d, s.hb2.data(), d_ff, gate);
    ops::GemmEpilogue up;
    up.multiply = s.hb2.data();
    up.ld_multiply = d_ff;
    run_linear(s, "ffn_up", layer, w.ffn_up, xb, nr, d, s.hb.data(), d_ff, up);
    run_linear(s, "ffn_down", layer, w.ffn_down, s.hb.data(), nr, d_ff, x, d, residual);
  }

  // The rows the last block computed (run_lm_head reads those).
  const double out_bytes = 1.0 * nr * d * sizeof(float);
  run_op(s, "out_norm", -1, nr, 4.0 * nr * d, 2 * out_bytes, 2 * out_bytes, [&] {
    ops::rms_norm(isa, x, nr, d, d, m.out_norm_weight.data(), c.norm_eps, xb, d, s.n_threads);
  });
}

}  // namespace sqrtdk
