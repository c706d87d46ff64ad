// Hugging Face checkpoint -> .sqdk (`sqrtdk convert`): config.json with HF field names plus model.safetensors, or
// shards model-0000N-of-0000M.safetensors listed by model.safetensors.index.json.
//
// The family comes from config.json `architectures` (else `model_type`); each family states which names are its,
// how config.json maps onto ModelConfig and how its tensors are named in the checkpoint (models/<family>/
// <family>_family.cpp: GPT2LMHeadModel / GPT2Model -> gpt2, LlamaForCausalLM -> llama).
// With tie_word_embeddings, lm_head.weight must be absent or equal to the embedding. Any other tensor the family
// does not use is an error (it would mean a model variant that we would silently compute wrong), as are config
// features we do not implement (rope_scaling, attention/mlp biases in llama, activations other than the family's).
//
// Memory: tensors are read with pread in chunks of about 4 MiB (a transposed GPT-2 weight whole) and converted
// straight into the streaming .sqdk writer (engine/include/sqrtdk/format.h, WeightFileWriter), so resident memory
// stays at a few chunk buffers plus the largest transposed tensor, whatever the model size (measured: 11.6 MB peak RSS
// converting a 536 MB llama checkpoint). The data is not read through the mapping: on this VM the first touch of each
// mapped 4 KiB page costs microseconds, and pread into reused buffers converted twice as fast (1.6 s vs 3.2 s for
// 536 MB to tmpfs). The output appears under its final name only when complete (temporary file, fsync, rename).
// GGUF files (llama.cpp) -> .sqdk: convert_gguf below (engine/src/import/gguf.h has the reader and its checks).
#pragma once

#include <sqrtdk/format.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

// Builds the ModelConfig from the text of a config.json. Throws sqrtdk::Error "<where>: ..." naming the field for a
// missing or invalid field, an unknown architecture or an unsupported feature.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& where);

struct ConvertOptions {
  // Output dtype; unset: the dtype of the checkpoint's weights if they share one, else f32 (GGUF: q8 when every
  // linear weight is Q8_0; .sqdk input: each tensor keeps its type). With q8 the linear layers' weight matrices are
  // q8 (their last dimension must be a multiple of 32), norms and biases f32; with f32/f16/bf16 every tensor has it.
  std::optional<DType> dtype;
  // The embeddings' and lm head's dtype (tok_emb, pos_emb, lm_head.weight); unset: the same as dtype.
  std::optional<DType> head_dtype;
  // Store the folder's tokenizer (tokenizer.json + tokenizer_config.json, vocab.json + merges.txt, or
  // tokenizer.model: <sqrtdk/tokenizer.h> tokenizer_spec_from_dir) in the file, so the model takes text. The
  // tokenizer's BOS/EOS ids replace config.json's (they are what it adds and where generation stops).
  bool with_tokenizer = true;
  // Called after each chunk with the bytes of tensor data written so far and the total.
  std::function<void(uint64_t done_bytes, uint64_t total_bytes)> progress;
};

struct ConvertResult {
  ModelConfig config;
  DType dtype = DType::f32;       // the linear weights' type
  DType head_dtype = DType::f32;  // the embeddings' and lm head's
  size_t n_tensors = 0;
  uint64_t bytes_read = 0;     // source tensor bytes read
  uint64_t file_size = 0;      // size of the .sqdk written
  std::vector<std::string> skipped;  // source tensors not converted (buffers, a tied lm_head)
  std::string tokenizer;             // what was stored, e.g. "byte-level BPE, 50 257 pieces"; empty: none
};

// Converts the checkpoint in `hf_dir` to `out_path`. Everything is checked (config, every tensor's presence, dtype
// and shape, unused tensors) before the output is created. Throws sqrtdk::Error naming the file and the tensor.
// Narrowing to f16 that turns a finite value into Inf is an error naming the tensor.
ConvertResult convert_hf_checkpoint(const std::string& hf_dir, const std::string& out_path,
                                    const ConvertOptions& options = {});

// Converts a llama.cpp GGUF file (version 2 or 3) to `out_path`: architectures llama and gpt2; tensor types F32,
// F16, BF16 and Q8_0. A tensor whose output type is its own is copied (Q8_0 blocks are .sqdk's q8 blocks, byte for
// byte: no requantization); others are converted. Default output: q8 when every linear weight is Q8_0 (the
// embeddings and lm head q8 if Q8_0 too, else f32), else the tensors' own dtype when they share F32, F16 or BF16,
// else f32. llama q/k rows are put back from llama.cpp's interleaved order into the Hugging Face layout, so
// the file has rotate-half RoPE. The tokenizer in tokenizer.ggml.* (model "gpt2" or "llama") is read too. The whole
// file is checked (layout, metadata, every tensor's presence, type and shape, unused tensors) before the output is
// created. Throws sqrtdk::Error naming the file and the key or tensor (kind unsupported for a valid file sqrtdk
// cannot run: another architecture, a Q4_K tensor, RoPE scaling).
ConvertResult convert_gguf(const std::string& gguf_path, const std::string& out_path,
                           const ConvertOptions& options = {});

// Re-types an existing .sqdk file (e.g. the f32 bundled model -> bf16 or q8): the same config, tensors and
// tokenizer, each tensor converted to its output type (options.dtype / head_dtype; unset: kept) through f32, or copied
// when the type stays. The input is fully validated (WeightFile::open) first. Throws sqrtdk::Error naming the tensor.
ConvertResult convert_sqdk(const std::string& sqdk_path, const std::string& out_path,
                           const ConvertOptions& options = {});

}  // namespace sqrtdk
