// GGUF reader: parsing and validation of the whole layout, typed metadata access (the format is in gguf.h).
#include "engine/src/import/gguf.h"

#include <sqrtdk/error.h>

#include "engine/src/format/format_internal.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace sqrtdk {

using format_detail::quote_name;

static_assert(std::endian::native == std::endian::little, "GGUF data is read in place as little-endian");

namespace {

Error bad_file(const std::string& message) { return Error(ErrorKind::bad_file, message); }

// Bytes per element of the fixed-size value types (0: not fixed-size).
uint64_t value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
    default: return 0;
  }
}

bool is_integer(GgufValueType t) {
  return t == GgufValueType::u8 || t == GgufValueType::i8 || t == GgufValueType::u16 || t == GgufValueType::i16 ||
         t == GgufValueType::u32 || t == GgufValueType::i32 || t == GgufValueType::u64 || t == GgufValueType::i64;
}

// One element of an integer type at p, widened; `negative` set for a negative signed value.
int64_t load_integer(GgufValueType t, const unsigned char* p, bool& too_large) {
  too_large = false;
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t) {
    case GgufValueType::u8: return load(uint8_t{});
    case GgufValueType::i8: return load(int8_t{});
    case GgufValueType::u16: return load(uint16_t{});
    case GgufValueType::i16: return load(int16_t{});
    case GgufValueType::u32: return load(uint32_t{});
    case GgufValueType::i32: return load(int32_t{});
    case GgufValueType::i64: return load(int64_t{});
    case GgufValueType::u64: {
      const uint64_t v = load(uint64_t{});
      too_large = v > uint64_t(INT64_MAX);
      return static_cast<int64_t>(v & uint64_t(INT64_MAX));
    }
    default: return 0;
  }
}

// Block size (elements) and bytes per block of every ggml type id (ggml.h, ggml-common.h); ids retired from ggml
// (4, 5, 31..33, 36..38) and unknown ids have none.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  uint64_t block, block_bytes;
};
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},           {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},       {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},        {7, "Q5_1", 32, 24},       {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},      {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},     {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},  {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98},   {19, "IQ1_S", 256, 50},    {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},     {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},          {27, "I64", 1, 8},         {28, "F64", 1, 8},         {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},         {34, "TQ1_0", 256, 54},    {35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},
};

const GgmlTypeInfo* find_ggml_type(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string dims_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// A bounds-checked cursor over the file's bytes: every read names what it reads, so a truncated file says where.
class Cursor {
 public:
  Cursor(const unsigned char* bytes, uint64_t size, const std::string& where) : p_(bytes), size_(size), w_(where) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      throw bad_file(w_ + what + ": the file ends at byte " + std::to_string(size_) + ", " + std::to_string(n) +
                     " bytes needed at offset " + std::to_string(pos_) + " (truncated?)");
  }
  const unsigned char* take(uint64_t n, const std::string& what) {
    need(n, what);
    const unsigned char* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  uint32_t u32(const std::string& what) {
    uint32_t v;
    std::memcpy(&v, take(4, what), 4);
    return v;
  }
  uint64_t u64(const std::string& what) {
    uint64_t v;
    std::memcpy(&v, take(8, what), 8);
    return v;
  }
  // A GGUF string: u64 length, then the bytes. The length is checked against what is left (and `max`) first.
  std::string_view string(const std::string& what, uint64_t max) {
    const uint64_t n = u64(what + " length");
    if (n > max)
      throw bad_file(w_ + what + ": length " + std::to_string(n) + " is over the limit of " + std::to_string(max) +
                     " bytes");
    need(n, what + " (" + std::to_string(n) + " bytes)");
    return {reinterpret_cast<const char*>(take(n, what)), static_cast<size_t>(n)};
  }

 private:
  const unsigned char* p_;
  uint64_t size_, pos_ = 0;
  const std::string& w_;
};

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(names) ? names[i] : "unknown";
}

const char* ggml_type_name(uint32_t type) {
  const GgmlTypeInfo* t = find_ggml_type(type);
  return t ? t->name : "unknown";
}

std::unique_ptr<GgufFile> GgufFile::parse(const unsigned char* bytes, uint64_t size, const std::string& where) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = where;
  file->file_ = std::make_unique<MappedFile>(bytes, size, where);
  file->bytes_ = bytes;
  file->size_ = size;
  file->parse_all();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->file_ = std::make_unique<MappedFile>(path);
  file->bytes_ = file->file_->bytes();
  file->size_ = file->file_->size();
  file->parse_all();
  return file;
}

GgufFile::~GgufFile() = default;

void GgufFile::parse_all() {
  const std::string w = path_ + ": ";
  Cursor c(bytes_, size_, w);
  if (size_ < 4 || std::memcmp(bytes_, "GGUF", 4) != 0)
    throw bad_file(w + "not a GGUF file (the first 4 bytes are not 'GGUF')");
  c.take(4, "magic");
  version_ = c.u32("header: version");
  if (version_ == 0x02000000u || version_ == 0x03000000u)
    throw bad_file(w + "header: a big-endian GGUF file (sqrtdk reads little-endian GGUF only)");
  if (version_ != 2 && version_ != 3)
    throw bad_file(w + "header: version " + std::to_string(version_) +
                   " (expected 2 or 3; version 1 files, from before September 2023, are not read)");
  const uint64_t n_tensors = c.u64("header: n_tensors");
  const uint64_t n_kv = c.u64("header: n_kv");
  // Smallest encodings: a KV is key length (8) + a 1-byte key + type (4) + a 1-byte value; a tensor info is name
  // length (8) + a 1-byte name + n_dims (4) + one dimension (8) + type (4) + offset (8).
  constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1, kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
  if (n_kv > kGgufMaxKvs || n_kv > c.left() / kMinKvBytes)
    throw bad_file(w + "header: n_kv " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.left()) +
                   " bytes left (or is over the limit of " + std::to_string(kGgufMaxKvs) + ")");
  if (n_tensors > kGgufMaxTensors || n_tensors > c.left() / kMinTensorInfoBytes)
    throw bad_file(w + "header: n_tensors " + std::to_string(n_tensors) + " cannot fit in the " +
                   std::to_string(c.left()) + " bytes left (or is over the limit of " +
                   std::to_string(kGgufMaxTensors) + ")");

  kvs_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string kv_what = "key #" + std::to_string(i);
    const std::string_view key = c.string(kv_what, kGgufMaxKeyBytes);
    if (key.empty()) throw bad_file(w + kv_what + ": empty key");
    const std::string at = "key '" + quote_name(key) + "'";
    GgufValue v;
    v.type = static_cast<GgufValueType>(c.u32(at + ": value type"));
    if (v.type == GgufValueType::string) {
      const std::string_view s = c.string(at + ": string", UINT64_MAX);
      v.data = reinterpret_cast<const unsigned char*>(s.data());
      v.size = s.size();
    } else if (v.type == GgufValueType::array) {
      v.element_type = static_cast<GgufValueType>(c.u32(at + ": array element type"));
      v.count = c.u64(at + ": array length");
      const uint64_t es = value_size(v.element_type);
      if (v.element_type == GgufValueType::string) {
        if (v.count > c.left() / 8)  // each string has at least its 8-byte length
          throw bad_file(w + at + ": array of " + std::to_string(v.count) + " strings cannot fit in the " +
                         std::to_string(c.left()) + " bytes left");
        v.data = bytes_ + c.pos();
        for (uint64_t k = 0; k < v.count; ++k) c.string(at + ": string #" + std::to_string(k), UINT64_MAX);
        v.size = static_cast<uint64_t>(bytes_ + c.pos() - v.data);
      } else if (es == 0) {
        throw bad_file(w + at + ": array element type " + std::to_string(static_cast<uint32_t>(v.element_type)) +
                       " (" + gguf_value_type_name(v.element_type) +
                       ") is not allowed (expected a scalar type or string; arrays of arrays are not read)");
      } else {
        if (v.count > c.left() / es)
          throw bad_file(w + at + ": array of " + std::to_string(v.count) + " " +
                         gguf_value_type_name(v.element_type) + " cannot fit in the " + std::to_string(c.left()) +
                         " bytes left");
        v.size = v.count * es;
        v.data = c.take(v.size, at + ": array");
      }
    } else {
      const uint64_t es = value_size(v.type);
      if (es == 0)
        throw bad_file(w + at + ": unknown value type " + std::to_string(static_cast<uint32_t>(v.type)) +
                       " (expected 0..12)");
      v.size = es;
      v.data = c.take(es, at + ": " + gguf_value_type_name(v.type) + " value");
    }
    kvs_.push_back({std::string(key), v});
  }
  kv_by_key_.resize(kvs_.size());
  for (uint32_t i = 0; i < kv_by_key_.size(); ++i) kv_by_key_[i] = i;
  std::sort(kv_by_key_.begin(), kv_by_key_.end(), [&](uint32_t a, uint32_t b) { return kvs_[a].key < kvs_[b].key; });
  for (size_t i = 1; i < kv_by_key_.size(); ++i)
    if (kvs_[kv_by_key_[i]].key == kvs_[kv_by_key_[i - 1]].key)
      throw bad_file(w + "key '" + quote_name(kvs_[kv_by_key_[i]].key) + "' appears twice");

  if (const GgufKv* a = find_kv("general.alignment")) {
    if (a->value.type != GgufValueType::u32)
      throw bad_file(where_key(a->key) + "type " + gguf_value_type_name(a->value.type) + " (expected u32)");
    std::memcpy(&alignment_, a->value.data, 4);
    if (alignment_ == 0 || !std::has_single_bit(alignment_))
      throw bad_file(where_key(a->key) + std::to_string(alignment_) + " is not a power of two");
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string_view name = c.string("tensor info #" + std::to_string(i) + ": name", kGgufMaxNameBytes);
    if (name.empty()) throw bad_file(w + "tensor info #" + std::to_string(i) + ": empty name");
    const std::string t = w + "tensor '" + quote_name(name) + "': ";
    GgufTensor info;
    info.name = std::string(name);
    const uint32_t n_dims = c.u32(t + "n_dims");
    if (n_dims < 1 || n_dims > kGgufMaxDims)
      throw bad_file(t + "n_dims " + std::to_string(n_dims) + " (expected 1.." + std::to_string(kGgufMaxDims) + ")");
    info.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      info.ne.push_back(c.u64(t + "dimension " + std::to_string(d)));
      if (info.ne.back() == 0) throw bad_file(t + "dimensions " + dims_text(info.ne) + " include 0 (expected >= 1)");
      if (__builtin_mul_overflow(info.n_elements, info.ne.back(), &info.n_elements))
        throw bad_file(t + "dimensions " + dims_text(info.ne) + "... element count overflows 64 bits");
    }
    info.shape.assign(info.ne.rbegin(), info.ne.rend());
    info.type = c.u32(t + "type");
    const GgmlTypeInfo* type = find_ggml_type(info.type);
    if (!type) throw bad_file(t + "unknown ggml type " + std::to_string(info.type));
    if (info.ne[0] % type->block != 0)
      throw bad_file(t + "row of " + std::to_string(info.ne[0]) + " elements is not a whole number of " + type->name +
                     " blocks of " + std::to_string(type->block));
    if (__builtin_mul_overflow(info.n_elements / type->block, type->block_bytes, &info.size))
      throw bad_file(t + "dimensions " + dims_text(info.ne) + " byte size overflows 64 bits");
    info.offset = c.u64(t + "offset");  // relative until the data section is known
    if (info.offset % alignment_ != 0)
      throw bad_file(t + "offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
                     std::to_string(alignment_));
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment (a file without tensors may end before it).
  const uint64_t pad = (alignment_ - c.pos() % alignment_) % alignment_;
  data_offset_ = c.pos() + pad;
  if (!tensors_.empty() && pad > c.left())
    throw bad_file(w + "the file ends at byte " + std::to_string(size_) + ", before the data section at " +
                   std::to_string(data_offset_) + " (truncated?)");
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (GgufTensor& info : tensors_) {
    if (info.offset > data_size || info.size > data_size - info.offset)
      throw bad_file(where_tensor(info.name) + "data [" + std::to_string(info.offset) + ", +" +
                     std::to_string(info.size) + ") runs past the data section (" + std::to_string(data_size) +
                     " bytes; truncated file?)");
    info.offset += data_offset_;
  }
  tensor_by_name_.resize(tensors_.size());
  for (uint32_t i = 0; i < tensor_by_name_.size(); ++i) tensor_by_name_[i] = i;
  std::sort(tensor_by_name_.begin(), tensor_by_name_.end(),
            [&](uint32_t a, uint32_t b) { return tensors_[a].name < tensors_[b].name; });
  for (size_t i = 1; i < tensor_by_name_.size(); ++i)
    if (tensors_[tensor_by_name_[i]].name == tensors_[tensor_by_name_[i - 1]].name)
      throw bad_file(w + "tensor '" + quote_name(tensors_[tensor_by_name_[i]].name) + "' appears twice");
  std::vector<const GgufTensor*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->size)
      throw bad_file(w + "tensors '" + quote_name(by_offset[i - 1]->name) + "' and '" + quote_name(by_offset[i]->name) +
                     "' overlap");
}

const GgufKv* GgufFile::find_kv(std::string_view key) const {
  auto it = std::lower_bound(kv_by_key_.begin(), kv_by_key_.end(), key,
                             [&](uint32_t i, std::string_view k) { return kvs_[i].key < k; });
  return it != kv_by_key_.end() && kvs_[*it].key == key ? &kvs_[*it] : nullptr;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = std::lower_bound(tensor_by_name_.begin(), tensor_by_name_.end(), name,
                             [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  return it != tensor_by_name_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
}

std::string GgufFile::where_key(std::string_view key) const { return path_ + ": key '" + quote_name(key) + "': "; }
std::string GgufFile::where_tensor(std::string_view name) const {
  return path_ + ": tensor '" + quote_name(name) + "': ";
}

const GgufKv& GgufFile::require_kv(std::string_view key, const std::string& why) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) throw bad_file(path_ + ": key '" + quote_name(key) + "' is missing (" + why + ")");
  return *kv;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) return std::nullopt;
  if (!is_integer(kv->value.type))
    throw bad_file(where_key(key) + "type " + gguf_value_type_name(kv->value.type) + " (expected an integer)");
  bool too_large;
  const int64_t v = load_integer(kv->value.type, kv->value.data, too_large);
  if (too_large) {
    uint64_t u;
    std::memcpy(&u, kv->value.data, 8);
    return u;
  }
  if (v < 0) throw bad_file(where_key(key) + std::to_string(v) + " is negative");
  return static_cast<uint64_t>(v);
}

std::optional<double> GgufFile::get_real(std::string_view key) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) return std::nullopt;
  if (kv->value.type == GgufValueType::f32) {
    float f;
    std::memcpy(&f, kv->value.data, 4);
    return f;
  }
  if (kv->value.type == GgufValueType::f64) {
    double d;
    std::memcpy(&d, kv->value.data, 8);
    return d;
  }
  throw bad_file(where_key(key) + "type " + gguf_value_type_name(kv->value.type) + " (expected f32 or f64)");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) return std::nullopt;
  if (kv->value.type != GgufValueType::boolean)
    throw bad_file(where_key(key) + "type " + gguf_value_type_name(kv->value.type) + " (expected bool)");
  if (kv->value.data[0] > 1) throw bad_file(where_key(key) + "bool byte " + std::to_string(kv->value.data[0]) + " (expected 0 or 1)");
  return kv->value.data[0] == 1;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) return std::nullopt;
  if (kv->value.type != GgufValueType::string)
    throw bad_file(where_key(key) + "type " + gguf_value_type_name(kv->value.type) + " (expected string)");
  return std::string(reinterpret_cast<const char*>(kv->value.data), kv->value.size);
}

uint64_t GgufFile::require_uint(std::string_view key, const std::string& why) const {
  require_kv(key, why);
  return *get_uint(key);
}
double GgufFile::require_real(std::string_view key, const std::string& why) const {
  require_kv(key, why);
  return *get_real(key);
}
std::string GgufFile::require_string(std::string_view key, const std::string& why) const {
  require_kv(key, why);
  return *get_string(key);
}

const GgufValue* GgufFile::array_of(std::string_view key) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) return nullptr;
  if (kv->value.type != GgufValueType::array)
    throw bad_file(where_key(key) + "type " + gguf_value_type_name(kv->value.type) + " (expected an array)");
  return &kv->value;
}

std::optional<uint64_t> GgufFile::array_size(std::string_view key) const {
  const GgufValue* a = array_of(key);
  return a ? std::optional<uint64_t>(a->count) : std::nullopt;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* a = array_of(key);
  if (!a) return std::nullopt;
  if (a->element_type != GgufValueType::string)
    throw bad_file(where_key(key) + "array of " + gguf_value_type_name(a->element_type) + " (expected strings)");
  std::vector<std::string> out;
  out.reserve(a->count);
  // Lengths were checked by the parser; the walk stays inside the array's bytes.
  const unsigned char* p = a->data;
  for (uint64_t i = 0; i < a->count; ++i) {
    uint64_t n;
    std::memcpy(&n, p, 8);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), n);
    p += 8 + n;
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* a = array_of(key);
  if (!a) return std::nullopt;
  if (!is_integer(a->element_type))
    throw bad_file(where_key(key) + "array of " + gguf_value_type_name(a->element_type) + " (expected integers)");
  const uint64_t es = value_size(a->element_type);
  std::vector<int64_t> out(a->count);
  for (uint64_t i = 0; i < a->count; ++i) {
    bool too_large;
    out[i] = load_integer(a->element_type, a->data + i * es, too_large);
    if (too_large) throw bad_file(where_key(key) + "element " + std::to_string(i) + " is over 2^63");
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::get_real_array(std::string_view key) const {
  const GgufValue* a = array_of(key);
  if (!a) return std::nullopt;
  if (a->element_type != GgufValueType::f32 && a->element_type != GgufValueType::f64)
    throw bad_file(where_key(key) + "array of " + gguf_value_type_name(a->element_type) + " (expected f32 or f64)");
  std::vector<float> out(a->count);
  for (uint64_t i = 0; i < a->count; ++i) {
    if (a->element_type == GgufValueType::f32) {
      std::memcpy(&out[i], a->data + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, a->data + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

void GgufFile::read(uint64_t offset, uint64_t size, void* dst) const { file_->read(offset, size, dst); }

}  // namespace sqrtdk
