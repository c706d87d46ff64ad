// Safetensors reader: header validation and the read-only mapping (the checks are listed in safetensors.h).
#include "engine/src/import/safetensors.h"

#include <sqrtdk/error.h>

#include "engine/src/format/format_internal.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace sqrtdk {

using format_detail::quote_name;

namespace {

// Everything this reader throws is about the file: ErrorKind::bad_file.
Error bad_file(const std::string& message) { return Error(ErrorKind::bad_file, message); }

// A safetensors header is {name: {dtype, shape: [..], data_offsets: [..]}} (depth 3; __metadata__ is a flat
// string map). The cap keeps a hostile header from building deep trees.
constexpr int kMaxHeaderDepth = 8;

struct DTypeEntry {
  const char* name;
  uint64_t size;
  std::optional<DType> dtype;
};
constexpr DTypeEntry kDTypes[] = {
    {"F32", 4, DType::f32}, {"F16", 2, DType::f16}, {"BF16", 2, DType::bf16}, {"F64", 8, {}},
    {"I64", 8, {}},         {"U64", 8, {}},         {"I32", 4, {}},           {"U32", 4, {}},
    {"I16", 2, {}},         {"U16", 2, {}},         {"I8", 1, {}},            {"U8", 1, {}},
    {"BOOL", 1, {}},        {"F8_E4M3", 1, {}},     {"F8_E5M2", 1, {}},
};

// A JSON value for an error message: compact, one line, at most ~40 characters.
std::string brief_json(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

uint64_t unsigned_value(const nlohmann::json& v, const std::string& where, const char* what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw bad_file(where + what + " must hold non-negative integers below 2^64, got " + brief_json(v));
  return v.get<uint64_t>();
}

}  // namespace

std::string SafetensorsTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<SafetensorsTensor> parse_safetensors(const unsigned char* bytes, uint64_t size, const std::string& where) {
  const std::string w = where + ": ";
  if (size < 8) throw bad_file(w + "file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxSafetensorsHeaderBytes)
    throw bad_file(w + "header length " + std::to_string(header_len) + " is over the " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit (not a safetensors file?)");
  if (header_len > size - 8)
    throw bad_file(w + "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes; truncated?)");
  const uint64_t data_start = 8 + header_len, data_size = size - data_start;
  const char* text = reinterpret_cast<const char*>(bytes + 8);

  struct TooDeep {};
  struct Duplicate {
    std::string name;
  };
  std::unordered_set<std::string> keys;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        text, text + header_len,
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (depth > kMaxHeaderDepth) throw TooDeep{};
          if (event == nlohmann::json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second)
            throw Duplicate{parsed.get<std::string>()};
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    throw bad_file(w + "header is not valid JSON: " + e.what());
  } catch (const TooDeep&) {
    throw bad_file(w + "header JSON nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels");
  } catch (const Duplicate& d) {
    throw bad_file(w + "tensor '" + quote_name(d.name) + "' appears twice in the header");
  }
  if (!header.is_object()) throw bad_file(w + "header is not a JSON object");

  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string t = w + "tensor '" + quote_name(name) + "': ";
    if (name.empty()) throw bad_file(w + "a tensor has an empty name");
    if (!entry.is_object()) throw bad_file(t + "entry is not a JSON object");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) throw bad_file(t + "no '" + key + "' field");
    const auto& dtype = entry["dtype"];
    const auto& shape = entry["shape"];
    const auto& offsets = entry["data_offsets"];
    SafetensorsTensor info;
    info.name = name;
    if (!dtype.is_string()) throw bad_file(t + "dtype must be a string, got " + brief_json(dtype));
    info.dtype_name = dtype.get<std::string>();
    const DTypeEntry* known = nullptr;
    for (const auto& d : kDTypes)
      if (info.dtype_name == d.name) known = &d;
    if (!known) throw bad_file(t + "unknown dtype " + brief_json(dtype) + " (sqrtdk reads F32, F16 and BF16)");
    info.dtype = known->dtype;
    if (!shape.is_array()) throw bad_file(t + "shape must be an array, got " + brief_json(shape));
    if (shape.size() > 16) throw bad_file(t + "shape has " + std::to_string(shape.size()) + " dimensions (at most 16)");
    info.n_elements = 1;
    for (const auto& d : shape) {
      info.shape.push_back(unsigned_value(d, t, "shape"));
      if (__builtin_mul_overflow(info.n_elements, info.shape.back(), &info.n_elements))
        throw bad_file(t + "shape " + info.shape_string() + "... element count overflows 64 bits");
    }
    uint64_t bytes_needed;
    if (__builtin_mul_overflow(info.n_elements, known->size, &bytes_needed))
      throw bad_file(t + "shape " + info.shape_string() + " byte size overflows 64 bits");
    if (!offsets.is_array() || offsets.size() != 2)
      throw bad_file(t + "data_offsets must be [begin, end], got " + brief_json(offsets));
    const uint64_t begin = unsigned_value(offsets[0], t, "data_offsets");
    const uint64_t end = unsigned_value(offsets[1], t, "data_offsets");
    if (begin > end)
      throw bad_file(t + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] end before they begin");
    if (end > data_size)
      throw bad_file(t + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] run past the data section (" + std::to_string(data_size) + " bytes; truncated file?)");
    if (end - begin != bytes_needed)
      throw bad_file(t + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                     std::to_string(end - begin) + " bytes, but " + info.dtype_name + " " + info.shape_string() +
                     " needs " + std::to_string(bytes_needed));
    info.offset = data_start + begin;
    info.size = bytes_needed;
    tensors.push_back(std::move(info));
  }

  std::sort(tensors.begin(), tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
  });
  const SafetensorsTensor* furthest = nullptr;  // the non-empty tensor ending last so far
  for (const auto& t : tensors) {
    if (t.size == 0) continue;
    if (furthest && t.offset < furthest->offset + furthest->size)
      throw bad_file(w + "tensors '" + quote_name(furthest->name) + "' and '" + quote_name(t.name) + "' overlap");
    if (!furthest || t.offset + t.size > furthest->offset + furthest->size) furthest = &t;
  }
  return tensors;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->file_ = std::make_unique<MappedFile>(path);
  file->tensors_ = parse_safetensors(file->file_->bytes(), file->file_->size(), path);
  file->by_name_.resize(file->tensors_.size());
  for (uint32_t i = 0; i < file->by_name_.size(); ++i) file->by_name_[i] = i;
  std::sort(file->by_name_.begin(), file->by_name_.end(),
            [&](uint32_t a, uint32_t b) { return file->tensors_[a].name < file->tensors_[b].name; });
  return file;
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  return it != by_name_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
}

void SafetensorsFile::read(uint64_t offset, uint64_t size, void* dst) const { file_->read(offset, size, dst); }

}  // namespace sqrtdk
