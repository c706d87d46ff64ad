// .sqdk -> .sqdk with other tensor types (`sqrtdk convert model.sqdk --dtype q8`): convert_sqdk in
// <sqrtdk/convert.h>. Streams tensor by tensor in chunks of whole rows through f32 (or copies a tensor whose type
// stays), dropping the input's file pages as it goes: resident memory is a few chunk buffers.
#include <sqrtdk/convert.h>
#include <sqrtdk/error.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/format/format_internal.h"
#include "engine/src/import/dtype_convert.h"

#include <algorithm>
#include <filesystem>

namespace sqrtdk {

using namespace import_detail;

ConvertResult convert_sqdk(const std::string& sqdk_path, const std::string& out_path, const ConvertOptions& options) {
  const auto file = WeightFile::open(sqdk_path);
  const WeightFile& in = *file;
  ConvertResult result;
  ModelConfig config = in.config();
  const TokenizerSpec* tokenizer = options.with_tokenizer ? in.tokenizer() : nullptr;
  if (!options.with_tokenizer && config.tokenizer == TokenizerKind::bpe) config.tokenizer = TokenizerKind::none;
  if (tokenizer) result.tokenizer = tokenizer->summary();
  else if (config.tokenizer == TokenizerKind::byte_level) result.tokenizer = "byte-level (kept from the config)";
  result.config = config;

  // Output types: asked for, else each tensor's own. ConvertResult reports the first linear weight's and tok_emb's.
  std::vector<TensorToDeclare> declared;
  uint64_t total_bytes = 0;
  for (const TensorInfo& t : in.tensors()) {
    DType out = t.dtype;
    if (options.dtype || options.head_dtype) {
      const DType dtype = options.dtype.value_or(t.dtype);
      out = output_dtype_for(t.name, t.shape, dtype, options.head_dtype.value_or(dtype));
      if (!options.dtype && !is_head_tensor(t.name)) out = t.dtype;  // only --head-dtype: the rest keeps its type
    }
    check_output_dtype(sqdk_path, t.name, t.shape, out);
    declared.push_back({t.name, out, t.shape});
    total_bytes += tensor_bytes(out, t.shape);
  }
  result.dtype = result.head_dtype = declared.front().dtype;
  for (const auto& d : declared)
    if (d.name == "tok_emb") result.head_dtype = d.dtype;
  for (const auto& d : declared)
    if (d.shape.size() == 2 && !is_head_tensor(d.name)) {
      result.dtype = d.dtype;
      break;
    }

  std::error_code ec;
  if (std::filesystem::equivalent(out_path, sqdk_path, ec))
    throw Error(out_path + ": is the .sqdk file being converted (write the output somewhere else)");
  WeightFileWriter writer(out_path, config, declared);
  if (tokenizer) writer.set_tokenizer(*tokenizer);

  constexpr uint64_t kChunkElements = uint64_t{1} << 20;  // 4 MiB of f32 per step; a multiple of 32 (q8 blocks)
  std::vector<float> values;
  std::vector<unsigned char> encoded;
  uint64_t done_bytes = 0;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const TensorInfo& t = in.tensors()[i];
    const DType out = declared[i].dtype;
    const auto* src = static_cast<const unsigned char*>(in.data(t));
    if (out == t.dtype) {
      writer.append(src, t.size);  // same type: the bytes as they are (NaN payloads included)
      done_bytes += t.size;
    } else {
      const uint64_t n_total = t.n_elements();
      uint64_t overflowed = 0;
      for (uint64_t e0 = 0; e0 < n_total; e0 += kChunkElements) {
        const uint64_t n = std::min(kChunkElements, n_total - e0);
        values.resize(n);
        decode_to_f32(src + encoded_bytes(t.dtype, e0), t.dtype, n, values.data());
        encoded.resize(encoded_bytes(out, n));
        try {
          overflowed += encode_f32(values.data(), n, out, encoded.data());
        } catch (const Error& e) {
          throw Error(sqdk_path + ": tensor '" + format_detail::quote_name(t.name) + "': " + e.what());
        }
        writer.append(encoded.data(), encoded.size());
        done_bytes += encoded.size();
        if (options.progress) options.progress(done_bytes, total_bytes);
      }
      if (overflowed)
        throw Error(sqdk_path + ": tensor '" + format_detail::quote_name(t.name) + "': " + std::to_string(overflowed) +
                    " values are beyond the range of " + dtype_name(out) + " (convert with --dtype f32 or bf16)");
    }
    format_detail::drop_mapped_pages(src, t.size);
    result.bytes_read += t.size;
    if (options.progress) options.progress(done_bytes, total_bytes);
  }
  writer.commit();
  result.n_tensors = declared.size();
  result.file_size = writer.file_size();
  return result;
}

}  // namespace sqrtdk
