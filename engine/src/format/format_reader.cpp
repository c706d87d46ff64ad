// The .sqdk loader: maps the file read-only and validates everything before anyone sees a byte of it
// (spec and list of checks: engine/FORMAT.md).
//
// Nothing in the file is trusted. Every size, offset and shape product is computed with overflow checks before it
// is used; the directory is parsed with a bounds-checked cursor; nothing is allocated from a file-supplied count
// before that count is bounded by the bytes that would hold it. Every failure throws sqrtdk::Error of kind bad_file,
// "<path>: <header|config|tensor 'name'>: <what> (expected ...)", one line. WeightFile::open runs the checks as
// named steps, in this order: map_file, check_header, read_config, read_directory (read_entry per tensor),
// check_distinct, the family's tensor set, scan_data (CRCs, finiteness); the first failure is the one reported.
// The mapping is PROT_READ and private: a loaded model never writes its file. Checksum and finite scans run on
// LoadOptions::n_threads threads over 4 MiB pieces (the per-tensor CRC is joined with crc32_combine), so the result
// does not depend on the thread count.
// Known limit: a file truncated by another process *after* it is mapped raises SIGBUS on access (as with any mmap).
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/format/format_internal.h"
#include "ops/base/threading.h"
#include "ops/gemm/gemm.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sqrtdk {

using namespace format_detail;

namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string u64s(uint64_t v) { return std::to_string(v); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A piece of one tensor's data for the parallel scans.
struct Piece {
  uint32_t tensor;
  uint64_t offset, size;  // absolute file offset, bytes
  uint64_t result = 0;    // CRC-32 or non-finite count
};

std::vector<Piece> make_pieces(const std::vector<TensorInfo>& tensors) {
  constexpr uint64_t kPiece = uint64_t{4} << 20;  // 4 MiB: many pieces per big tensor, cheap to combine
  constexpr uint64_t kQ8Piece = kPiece / kQ8BlockBytes * kQ8BlockBytes;  // whole blocks, for the finite scan
  std::vector<Piece> pieces;
  for (uint32_t i = 0; i < tensors.size(); ++i)
    for (uint64_t at = 0, step = tensors[i].dtype == DType::q8 ? kQ8Piece : kPiece; at < tensors[i].size; at += step)
      pieces.push_back({i, tensors[i].offset + at, std::min(step, tensors[i].size - at)});
  return pieces;
}

// Runs fn over one piece of the mapping with its pages mapped in by one madvise call (faulting them 4 KiB at a
// time costs several times the CRC itself in this VM), then drops the pages wholly inside the piece from the
// resident set: the mapping is read-only and file-backed, so a later touch re-reads them from the page cache.
// Peak RSS of a verified load is then the pieces in flight, not the file. Both calls are hints: on a kernel
// without MADV_POPULATE_READ (Linux < 5.14) the scan faults pages in as it goes.
template <class Fn>
uint64_t scan_piece(const unsigned char* base, const Piece& piece, const Fn& fn) {
#ifdef MADV_POPULATE_READ
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(base + piece.offset);
  const uintptr_t map_begin = begin / page * page;
  madvise(reinterpret_cast<void*>(map_begin), begin + piece.size - map_begin, MADV_POPULATE_READ);
#endif
  const uint64_t result = fn(base + piece.offset, piece.size);
  drop_mapped_pages(base + piece.offset, piece.size);
  return result;
}

// `p` and `size` cover whole elements (q8: whole blocks): scan pieces are 4 MiB from the tensor's start, and a
// q8 tensor's pieces are cut at multiples of 34 bytes (make_pieces).
uint64_t count_nonfinite_bytes(const unsigned char* p, uint64_t size, DType dtype) {
  uint64_t bad = 0;
  if (dtype == DType::q8) {  // only the f16 scale can be NaN/Inf; it spoils all 32 values of its block
    for (uint64_t i = 0; i + kQ8BlockBytes <= size; i += kQ8BlockBytes)
      bad += (load_u16(p + i) & 0x7C00) == 0x7C00 ? kQ8BlockElements : 0;
  } else if (dtype == DType::f32) {
    for (uint64_t i = 0; i + 4 <= size; i += 4) bad += (load_u32(p + i) & 0x7F800000u) == 0x7F800000u;
  } else {
    const uint16_t mask = dtype == DType::f16 ? 0x7C00 : 0x7F80;
    for (uint64_t i = 0; i + 2 <= size; i += 2) bad += (load_u16(p + i) & mask) == mask;
  }
  return bad;
}

// Every failure of the reader is about the file: ErrorKind::bad_file.
Error file_error(const std::string& message) { return Error(ErrorKind::bad_file, message); }

// ModelConfig::validate and check_family_tensors also judge configs and tensor sets that come from callers (the
// writer, make-toy); here what they find wrong is the file's fault, so their errors become bad_file (same message).
template <class Fn>
void as_file_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    throw file_error(e.what());
  }
}

// ---- step 1: map the file ----
// Opens and maps `path` read-only (the caller owns the mapping from then on), after checking it is a regular file,
// within LoadOptions::max_bytes and at least a header long.
const unsigned char* map_file(const std::string& P, const LoadOptions& options, uint64_t& size) {
  Fd fd;
  // O_NONBLOCK: a FIFO (or a device) under the model's name must not hang the open; fstat then refuses it.
  fd.fd = ::open(P.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd.fd < 0) throw file_error(P + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw file_error(P + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw file_error(P + ": not a regular file");
  const uint64_t real_size = static_cast<uint64_t>(st.st_size);
  if (options.max_bytes != 0 && real_size > options.max_bytes)
    throw file_error(P + ": file is " + u64s(real_size) + " bytes, over the allowed " + u64s(options.max_bytes) +
                     " bytes (LoadOptions::max_bytes)");
  if (real_size < kHeaderSize)
    throw file_error(P + ": header: file is " + u64s(real_size) + " bytes, shorter than the " + u64s(kHeaderSize) +
                     "-byte header (truncated or not a .sqdk file)");
  if (real_size > SIZE_MAX) throw file_error(P + ": file of " + u64s(real_size) + " bytes cannot be mapped");
  // No MAP_POPULATE: the scans map each piece in with one call and drop it again (scan_piece), so a verified load
  // never holds the whole file resident on top of the packed weights.
  void* m = ::mmap(nullptr, real_size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (m == MAP_FAILED) throw file_error(P + ": cannot map " + u64s(real_size) + " bytes: " + std::strerror(errno));
  size = real_size;
  return static_cast<const unsigned char*>(m);
}

// ---- step 2: the header ----
// The header fields that place the directory and the data (the config is read by read_config).
struct Layout {
  uint32_t version;
  uint32_t n_tensors;
  uint64_t dir_size, data_offset;
  uint64_t tokenizer_offset = 0;  // version 2: where the tokenizer section lies (0: none)
  uint32_t tokenizer_size = 0, tokenizer_crc = 0;
};

// Checks magic, version, file size, where the directory and data lie, the reserved bytes, and (if asked) the
// header CRC over the header and the directory.
Layout check_header(const std::string& P, const unsigned char* h, uint64_t real_size, bool verify_checksum) {
  auto header_error = [&](const std::string& what) { return file_error(P + ": header: " + what); };
  if (std::memcmp(h + header_at::magic, kMagic, 4) != 0) {
    char got[32];
    std::snprintf(got, sizeof got, "%02X %02X %02X %02X", h[0], h[1], h[2], h[3]);
    throw header_error(std::string("bad magic ") + got + " (expected 53 51 44 4B 'SQDK'; not a .sqdk file)");
  }
  const uint32_t version = load_u32(h + header_at::version);
  if (version != kVersion && version != kVersionTokenizer)
    throw header_error("unsupported format version " + std::to_string(version) + " (this build reads versions " +
                       std::to_string(kVersion) + " and " + std::to_string(kVersionTokenizer) + ")");
  const uint64_t file_size = load_u64(h + header_at::file_size);
  if (file_size != real_size)
    throw header_error("file_size says " + u64s(file_size) + " bytes but the file has " + u64s(real_size) +
                       " (truncated or extended)");
  Layout l;
  l.version = version;
  l.n_tensors = load_u32(h + header_at::n_tensors);
  const uint64_t dir_offset = load_u64(h + header_at::directory_offset);
  l.dir_size = load_u64(h + header_at::directory_size);
  l.data_offset = load_u64(h + header_at::data_offset);
  if (dir_offset != kHeaderSize)
    throw header_error("directory_offset " + u64s(dir_offset) + " (expected " + u64s(kHeaderSize) + ")");
  if (l.dir_size > real_size - kHeaderSize)
    throw header_error("directory [128, 128 + " + u64s(l.dir_size) + ") runs past the end of the file (" +
                       u64s(real_size) + " bytes)");
  const uint64_t dir_end = kHeaderSize + l.dir_size;
  if (l.data_offset % kAlignment != 0 || l.data_offset < dir_end || l.data_offset > real_size)
    throw header_error("data_offset " + u64s(l.data_offset) + " (expected a multiple of 64 between the directory end " +
                       u64s(dir_end) + " and the file size " + u64s(real_size) + ")");
  // Without flag bit 2 the attention_scale bytes are reserved too (files older than the field have zeros there).
  const bool has_scale = load_u32(h + header_at::flags) & kFlagAttentionScale;
  // Version 2 uses bytes 112..127 for the tokenizer section (checked once the config is read: check_tokenizer).
  const uint64_t reserved_end = version == kVersion ? kHeaderSize : header_at::reserved;
  for (uint64_t i = has_scale ? header_at::reserved : header_at::attention_scale; i < reserved_end; ++i)
    if (h[i] != 0)
      throw header_error("reserved byte " + u64s(i) + " is " + std::to_string(h[i]) + " (expected 0" +
                         (i < header_at::reserved ? ": flag bit 2, attention_scale present, is clear)" : ")"));
  if (version == kVersionTokenizer) {
    l.tokenizer_offset = load_u64(h + header_at::tokenizer_offset);
    l.tokenizer_size = load_u32(h + header_at::tokenizer_size);
    l.tokenizer_crc = load_u32(h + header_at::tokenizer_crc32);
  }
  if (verify_checksum) {
    const uint32_t stored = load_u32(h + header_at::header_crc32);
    const uint32_t computed = header_crc(h, h + kHeaderSize, l.dir_size);
    if (stored != computed)
      throw header_error("checksum mismatch: stored CRC-32 " + hex32(stored) + ", computed " + hex32(computed) +
                         " over the header and directory (the file is corrupt)");
  }
  return l;
}

// ---- step 3: the config ----
ModelConfig read_config(const std::string& P, const unsigned char* h, uint32_t version) {
  const uint32_t arch = load_u32(h + header_at::arch), flags = load_u32(h + header_at::flags),
                 tokenizer = load_u32(h + header_at::tokenizer);
  if (arch > 1)
    throw file_error(P + ": config: unknown arch " + std::to_string(arch) + " (expected 0 = gpt2 or 1 = llama)");
  if (flags & ~kKnownFlags)
    throw file_error(P + ": config: unknown flag bits " + hex32(flags & ~kKnownFlags) +
                     " (expected only bits 0, 1 and 2)");
  if (tokenizer > 2)
    throw file_error(P + ": config: unknown tokenizer " + std::to_string(tokenizer) +
                     " (expected 0 = none, 1 = byte_level or 2 = bpe)");
  if (tokenizer == 2 && version != kVersionTokenizer)
    throw file_error(P + ": config: tokenizer 2 (bpe, in the tokenizer section) in a version " +
                     std::to_string(version) + " file (expected version " + std::to_string(kVersionTokenizer) + ")");
  ModelConfig c;
  c.arch = static_cast<Arch>(arch);
  c.d_model = load_u32(h + header_at::d_model);
  c.n_layers = load_u32(h + header_at::n_layers);
  c.n_heads = load_u32(h + header_at::n_heads);
  c.n_kv_heads = load_u32(h + header_at::n_kv_heads);
  c.head_dim = load_u32(h + header_at::head_dim);
  c.d_ff = load_u32(h + header_at::d_ff);
  c.n_vocab = load_u32(h + header_at::n_vocab);
  c.max_seq = load_u32(h + header_at::max_seq);
  c.norm_eps = load_f32(h + header_at::norm_eps);
  c.rope_theta = load_f32(h + header_at::rope_theta);
  c.tied_embeddings = flags & kFlagTiedEmbeddings;
  c.rope_interleaved = flags & kFlagRopeInterleaved;
  if (flags & kFlagAttentionScale) c.attention_scale = load_f32(h + header_at::attention_scale);
  c.tokenizer = static_cast<TokenizerKind>(tokenizer);
  c.bos_id = load_u32(h + header_at::bos_id);
  c.eos_id = load_u32(h + header_at::eos_id);
  as_file_error([&] { c.validate(P); });
  return c;
}

// ---- step 4: the directory ----
// Parses entry `i` at dir[at..dir_size) with a bounds-checked cursor, advancing `at`; checks its name, dtype,
// shape, that its size matches the shape, and that its data is 64-aligned, after data_offset and inside the file.
TensorInfo read_entry(const std::string& P, uint32_t i, const unsigned char* dir, uint64_t dir_size, uint64_t& at,
                      uint64_t data_offset, uint64_t real_size) {
  std::string label = "tensor #" + std::to_string(i);
  auto fail = [&](const std::string& what) { return file_error(P + ": " + label + ": " + what); };
  auto need = [&](uint64_t bytes, const char* field) {
    if (bytes > dir_size - at)
      throw fail(std::string("directory entry runs past the directory end at ") + field + " (directory is " +
                 u64s(dir_size) + " bytes)");
  };
  need(2, "name_len");
  const uint16_t name_len = load_u16(dir + at);
  at += 2;
  if (name_len == 0 || name_len > kMaxNameLen)
    throw fail("name_len " + std::to_string(name_len) + " (expected 1.." + std::to_string(kMaxNameLen) + ")");
  need(name_len, "name");
  TensorInfo t;
  t.name.assign(reinterpret_cast<const char*>(dir + at), name_len);
  at += name_len;
  label = "tensor '" + quote_name(t.name) + "'";
  if (std::string problem = name_problem(t.name); !problem.empty()) throw fail(problem);
  need(2, "dtype");
  const uint8_t dtype = dir[at], n_dims = dir[at + 1];
  at += 2;
  if (dtype > 3)
    throw fail("unknown dtype " + std::to_string(dtype) + " (expected 0 = f32, 1 = f16, 2 = bf16, 3 = q8)");
  t.dtype = static_cast<DType>(dtype);
  if (n_dims == 0 || n_dims > kMaxDims)
    throw fail("n_dims " + std::to_string(n_dims) + " (expected 1.." + std::to_string(kMaxDims) + ")");
  need(uint64_t{n_dims} * 8 + 8 + 8 + 4, "shape");
  uint64_t n_elements = 1;
  for (unsigned d = 0; d < n_dims; ++d) {
    const uint64_t dim = load_u64(dir + at);
    at += 8;
    t.shape.push_back(dim);
    if (dim == 0) throw fail("dimension " + std::to_string(d) + " is 0 (expected >= 1)");
    if (__builtin_mul_overflow(n_elements, dim, &n_elements))
      throw fail("shape " + t.shape_string() + "... has more than 2^64 elements");
  }
  t.offset = load_u64(dir + at);
  t.size = load_u64(dir + at + 8);
  t.crc32 = load_u32(dir + at + 16);
  at += 20;
  uint64_t bytes = 0;
  if (std::string problem = tensor_bytes_problem(t.dtype, t.shape, bytes); !problem.empty())
    throw fail("shape " + t.shape_string() + " of " + dtype_name(t.dtype) + ": " + problem);
  if (t.size != bytes)
    throw fail("shape " + t.shape_string() + " has " + u64s(n_elements) + " elements but size " + u64s(t.size) +
               " bytes (expected " + u64s(bytes) + " bytes for " + dtype_name(t.dtype) +
               (t.dtype == DType::q8 ? ": 34-byte blocks of 32 elements)" : ")"));
  if (t.offset % kAlignment != 0) throw fail("data offset " + u64s(t.offset) + " is not a multiple of 64");
  if (t.offset < data_offset)
    throw fail("data offset " + u64s(t.offset) + " is before data_offset " + u64s(data_offset));
  if (t.offset > real_size || t.size > real_size - t.offset)
    throw fail("data [" + u64s(t.offset) + ", " + u64s(t.offset) + " + " + u64s(t.size) +
               ") runs past the end of the file (" + u64s(real_size) + " bytes)");
  return t;
}

// Reads all n_tensors entries; the directory must hold exactly them. Nothing is allocated for n_tensors before it is
// bounded by the directory's size.
std::vector<TensorInfo> read_directory(const std::string& P, const unsigned char* dir, const Layout& l,
                                       uint64_t real_size) {
  if (uint64_t{l.n_tensors} > l.dir_size / kMinEntrySize)
    throw file_error(P + ": header: " + std::to_string(l.n_tensors) + " tensors cannot fit in a " + u64s(l.dir_size) +
                     "-byte directory (each entry is at least " + u64s(kMinEntrySize) + " bytes)");
  std::vector<TensorInfo> tensors;
  tensors.reserve(l.n_tensors);
  uint64_t at = 0;  // cursor inside the directory
  for (uint32_t i = 0; i < l.n_tensors; ++i)
    tensors.push_back(read_entry(P, i, dir, l.dir_size, at, l.data_offset, real_size));
  if (at != l.dir_size)
    throw file_error(P + ": header: directory has " + u64s(l.dir_size - at) + " bytes after its last entry (expected " +
                     u64s(l.dir_size) + " bytes to hold exactly " + std::to_string(l.n_tensors) + " entries)");
  return tensors;
}

// ---- step 5: names and data ranges across tensors ----
// Names are unique, and no two tensors' data overlap (sorted by offset, each ends before the next begins).
void check_distinct(const std::string& P, const std::vector<TensorInfo>& tensors) {
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  for (const auto& t : tensors)
    if (!names.insert(t.name).second) throw file_error(P + ": tensor '" + quote_name(t.name) + "': duplicate name");
  std::vector<uint32_t> order(tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& a = tensors[order[k - 1]];
    const TensorInfo& b = tensors[order[k]];
    if (a.offset + a.size > b.offset)
      throw file_error(P + ": tensor '" + quote_name(b.name) + "': data at " + u64s(b.offset) + " overlaps tensor '" +
                       quote_name(a.name) + "' [" + u64s(a.offset) + ", " + u64s(a.offset + a.size) + ")");
  }
}

// ---- step 5b: the tokenizer section (version 2 with tokenizer 2) ----
// Placed inside the data area, 64-aligned, overlapping no tensor; its CRC-32 in the header; its content checked
// field by field (deserialize_tokenizer) and against the config: the same BOS/EOS, and every id a row of tok_emb.
std::shared_ptr<const TokenizerSpec> read_tokenizer(const std::string& P, const unsigned char* h, const Layout& l,
                                                    const ModelConfig& config, const std::vector<TensorInfo>& tensors,
                                                    uint64_t real_size, bool verify_checksum) {
  const std::string where = P + ": tokenizer section";
  if (config.tokenizer != TokenizerKind::bpe) {
    if (l.tokenizer_offset != 0 || l.tokenizer_size != 0 || l.tokenizer_crc != 0)
      throw file_error(where + ": header bytes 112..127 are not zero but the config's tokenizer is " +
                       std::to_string(static_cast<uint32_t>(config.tokenizer)) + " (expected 2 = bpe with a section)");
    return nullptr;
  }
  const uint64_t begin = l.tokenizer_offset, size = l.tokenizer_size;
  if (size == 0 || begin % kAlignment != 0 || begin < l.data_offset || begin > real_size || size > real_size - begin)
    throw file_error(where + ": [" + u64s(begin) + ", +" + u64s(size) +
                     ") (expected a non-empty range at a multiple of 64 between data_offset " + u64s(l.data_offset) +
                     " and the file end " + u64s(real_size) + ")");
  for (const auto& t : tensors)
    if (begin < t.offset + t.size && t.offset < begin + size)
      throw file_error(where + ": [" + u64s(begin) + ", " + u64s(begin + size) + ") overlaps tensor '" +
                       quote_name(t.name) + "' [" + u64s(t.offset) + ", " + u64s(t.offset + t.size) + ")");
  if (verify_checksum) {
    const uint32_t computed = crc32(h + begin, size);
    if (computed != l.tokenizer_crc)
      throw file_error(where + ": checksum mismatch: stored CRC-32 " + hex32(l.tokenizer_crc) + ", computed " +
                       hex32(computed) + " (the data is corrupt)");
  }
  auto spec = std::make_shared<const TokenizerSpec>(deserialize_tokenizer(h + begin, size, where));
  check_tokenizer_fits(*spec, config, where);
  return spec;
}

// ---- step 6: scan the data ----
// Verifies each tensor's CRC-32 and/or counts its NaN/Inf values, as asked, over 4 MiB pieces in parallel.
// Threads only pay off for big files: waking a helper costs microseconds, while 1 MiB takes ~50 us to checksum.
// Pieces are the items, claimed as they come (ops/base/thread_pool.h).
void scan_data(const std::string& P, const unsigned char* h, const std::vector<TensorInfo>& tensors,
               const LoadOptions& options) {
  if (!options.verify_checksums && !options.check_finite) return;
  uint64_t total_bytes = 0;
  for (const auto& t : tensors) total_bytes += t.size;
  const int n_threads = total_bytes >= (uint64_t{1} << 20) ? resolve_threads(options.n_threads) : 1;
  std::vector<Piece> pieces = make_pieces(tensors);
  if (options.verify_checksums) {
    parallel_for(n_threads, pieces.size(), [&](size_t k, int) {
      pieces[k].result = scan_piece(h, pieces[k], [](const unsigned char* p, uint64_t n) { return crc32(p, n); });
    });
    std::vector<uint32_t> crc(tensors.size(), 0);
    for (const Piece& p : pieces) crc[p.tensor] = crc32_combine(crc[p.tensor], static_cast<uint32_t>(p.result), p.size);
    for (size_t i = 0; i < tensors.size(); ++i)
      if (crc[i] != tensors[i].crc32)
        throw file_error(P + ": tensor '" + quote_name(tensors[i].name) + "': checksum mismatch: stored CRC-32 " +
                         hex32(tensors[i].crc32) + ", computed " + hex32(crc[i]) + " (the data is corrupt)");
  }
  if (options.check_finite) {
    parallel_for(n_threads, pieces.size(), [&](size_t k, int) {
      pieces[k].result = scan_piece(h, pieces[k], [&](const unsigned char* p, uint64_t n) {
        return count_nonfinite_bytes(p, n, tensors[pieces[k].tensor].dtype);
      });
    });
    std::vector<uint64_t> bad(tensors.size(), 0);
    for (const Piece& p : pieces) bad[p.tensor] += p.result;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (bad[i] != 0)
        throw file_error(P + ": tensor '" + quote_name(tensors[i].name) + "': " + u64s(bad[i]) + " of " +
                         u64s(tensors[i].n_elements()) + " values are NaN or Inf (expected finite weights)");
  }
}

}  // namespace

WeightFile::~WeightFile() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), file_size_);
}

// The steps in order; each throws on the first thing wrong, so which message a broken file gets does not change.
std::shared_ptr<const WeightFile> WeightFile::open(const std::string& path, const LoadOptions& options) {
  std::shared_ptr<WeightFile> wf(new WeightFile());
  wf->path_ = path;
  const std::string& P = wf->path_;
  wf->map_ = map_file(P, options, wf->file_size_);  // unmapped by ~WeightFile if a later step throws
  const unsigned char* h = wf->map_;
  const Layout layout = check_header(P, h, wf->file_size_, options.verify_checksums);
  wf->config_ = read_config(P, h, layout.version);
  wf->tensors_ = read_directory(P, h + kHeaderSize, layout, wf->file_size_);
  const std::vector<TensorInfo>& tensors = wf->tensors_;
  check_distinct(P, tensors);
  as_file_error([&] { check_family_tensors(wf->config_, tensors, P); });
  wf->tokenizer_ = read_tokenizer(P, h, layout, wf->config_, tensors, wf->file_size_, options.verify_checksums);

  wf->by_name_.resize(tensors.size());
  for (uint32_t i = 0; i < tensors.size(); ++i) wf->by_name_[i] = i;
  std::sort(wf->by_name_.begin(), wf->by_name_.end(),
            [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; });

  scan_data(P, h, tensors, options);
  wf->checksums_verified_ = options.verify_checksums;
  return wf;
}

const TensorInfo* WeightFile::find(std::string_view name) const {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                   [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

const TensorInfo& WeightFile::require(std::string_view name, const std::vector<uint64_t>& expected_shape) const {
  TensorInfo expected;
  expected.shape = expected_shape;
  const TensorInfo* t = find(name);
  if (!t)
    throw file_error(path_ + ": tensor '" + quote_name(name) + "': missing (expected shape " + expected.shape_string() +
                ")");
  if (t->shape != expected_shape)
    throw file_error(path_ + ": tensor '" + quote_name(name) + "': shape " + t->shape_string() + " (expected " +
                expected.shape_string() + ")");
  return *t;
}

const void* WeightFile::data(const TensorInfo& tensor) const { return map_ + tensor.offset; }

void WeightFile::read_f32(const TensorInfo& tensor, float* dst) const {
  const unsigned char* src = map_ + tensor.offset;
  const uint64_t n = tensor.n_elements();
  switch (tensor.dtype) {
    case DType::f32: std::memcpy(dst, src, n * 4); break;
    case DType::f16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
      break;
    case DType::bf16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      break;
    case DType::q8: {  // blocks run on across rows (K is a multiple of 32): one call over the whole tensor
      static_assert(alignof(ops::Q8Block) == 2);  // tensor data is 64-aligned, so the blocks are aligned
      ops::dequantize_row_q8(reinterpret_cast<const ops::Q8Block*>(src), n, dst);
      break;
    }
  }
}

uint64_t WeightFile::count_nonfinite(const TensorInfo& tensor) const {
  return count_nonfinite_bytes(map_ + tensor.offset, tensor.size, tensor.dtype);
}

}  // namespace sqrtdk

namespace sqrtdk::format_detail {

void drop_mapped_pages(const void* p, uint64_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t drop_begin = (begin + page - 1) / page * page, drop_end = (begin + bytes) / page * page;
  if (drop_end > drop_begin) madvise(reinterpret_cast<void*>(drop_begin), drop_end - drop_begin, MADV_DONTNEED);
}

}  // namespace sqrtdk::format_detail
