// The C++ .sqdk writer (spec: engine/FORMAT.md; byte-identical to tools/sqdk.py for the same content).
//
// Layout: header (128 B), directory entries in the given order, zero padding to a multiple of 64, then each
// tensor's data at the next multiple of 64 with zero padding between; file_size = end of the last tensor.
// The content is validated with the loader's rules first. The bytes go to "<path>.tmp-<pid>-XXXXXX" (mkstemp) in
// the same folder, are fsynced, renamed over `path`, and the folder is fsynced: a killed writer leaves at most a
// temporary file, never a partial file under the final name (and the next writer of that path removes it).
// WeightFileWriter streams: the layout is fixed from names, dtypes and shapes, the data is appended tensor by tensor
// (CRCs computed on the way), and the header and directory are written over their reserved bytes at commit().
// write_weight_file is that writer fed with whole tensors.
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/format/format_internal.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <unordered_set>

#include <csignal>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sqrtdk {

using namespace format_detail;

namespace {

// The output must be a plain file path: an existing directory, device, FIFO or socket is refused (as root, `-o
// /dev/null` replaced /dev/null with a regular file), and so is a symbolic link (the rename would replace the link,
// not its target: give the target's path). Checked before any data is produced.
void check_output_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw Error(path + ": cannot check the output path: " + std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode))
    throw Error(path + ": is a symbolic link; the output would replace the link, not its target (give the target's "
                       "path, or remove the link)");
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory (the output must be a file path)");
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": is a device, FIFO or socket, not a regular file (the output must be a file path)");
}

// Temporary files are "<path>.tmp-<pid>-XXXXXX". Those of a writer that was killed (its pid no longer runs) are
// removed before a new one starts, so an interrupted convert does not leave hundreds of MB behind for good.
void remove_stale_temp_files(const std::string& final_path) {
  const std::filesystem::path final_p(final_path);
  const std::string prefix = final_p.filename().string() + ".tmp-";
  const std::filesystem::path dir = final_p.parent_path().empty() ? std::filesystem::path(".") : final_p.parent_path();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    char* rest = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &rest, 10);
    if (pid <= 0 || rest == nullptr || *rest != '-') continue;  // not one of ours
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH && it->is_regular_file(ec))
      std::filesystem::remove(it->path(), ec);
  }
}

class TempFile {
 public:
  explicit TempFile(const std::string& final_path)
      : final_(final_path), tmp_(final_path + ".tmp-" + std::to_string(::getpid()) + "-XXXXXX") {
    check_output_path(final_);
    remove_stale_temp_files(final_);
    fd_ = ::mkstemp(tmp_.data());  // unique name, created with O_EXCL
    if (fd_ < 0) throw Error(final_ + ": cannot create a temporary file beside it: " + std::strerror(errno));
    ::fchmod(fd_, 0644);  // mkstemp makes 0600; a model file is meant to be readable
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void write(const void* data, uint64_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size > (uint64_t{1} << 30) ? (size_t{1} << 30) : size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(final_ + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
      p += n;
      size -= static_cast<uint64_t>(n);
    }
  }
  void write_at(uint64_t offset, const void* data, uint64_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0) {
      const ssize_t n = ::pwrite(fd_, p, size > (uint64_t{1} << 30) ? (size_t{1} << 30) : size,
                                 static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(final_ + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
      p += n;
      offset += static_cast<uint64_t>(n);
      size -= static_cast<uint64_t>(n);
    }
  }
  void zeros(uint64_t n) {
    static const unsigned char z[4096] = {};
    while (n > 0) {
      const uint64_t k = n < sizeof(z) ? n : sizeof(z);
      write(z, k);
      n -= k;
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) throw Error(final_ + ": fsync failed: " + std::strerror(errno));
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw Error(final_ + ": close failed: " + std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), final_.c_str()) != 0) throw Error(final_ + ": rename failed: " + std::strerror(errno));
    committed_ = true;
    // Make the rename itself durable.
    const std::filesystem::path parent = std::filesystem::path(final_).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string final_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

struct WeightFileWriter::State {
  std::string path;
  std::vector<TensorInfo> infos;       // layout fixed at construction; crc32 filled as data arrives
  std::vector<size_t> crc_positions;   // where each entry's crc32 sits in `dir`
  std::vector<unsigned char> dir;
  unsigned char header[kHeaderSize] = {};
  uint64_t file_size = 0;
  std::unique_ptr<TempFile> out;
  uint64_t pos = 0;        // bytes written to the temporary file so far
  size_t current = 0;      // tensor receiving data
  uint64_t written = 0;    // bytes of the current tensor received
  bool committed = false;
  ModelConfig config;
  uint64_t tensors_end = 0;                     // end of the last tensor's data
  std::vector<unsigned char> tokenizer_section;  // set_tokenizer: written at the next multiple of 64 after the data
};

WeightFileWriter::WeightFileWriter(const std::string& path, const ModelConfig& config,
                                   const std::vector<TensorToDeclare>& tensors)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = path;
  config.validate(path);
  if (tensors.size() > UINT32_MAX) throw Error(path + ": too many tensors");

  // Directory entries and data layout, with the loader's checks.
  s.infos.reserve(tensors.size());
  std::unordered_set<std::string_view> names;
  for (const auto& t : tensors) {
    const std::string where = path + ": tensor '" + quote_name(t.name) + "': ";
    if (std::string problem = name_problem(t.name); !problem.empty()) throw Error(where + problem);
    if (!names.insert(t.name).second) throw Error(where + "duplicate name");
    if (static_cast<uint8_t>(t.dtype) > 3) throw Error(where + "unknown dtype");
    if (t.shape.empty() || t.shape.size() > kMaxDims) throw Error(where + "n_dims must be 1..4");
    TensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.shape;
    info.size = tensor_bytes(t.dtype, t.shape, path, t.name);  // q8: the last dimension a multiple of 32
    s.infos.push_back(std::move(info));
  }
  check_family_tensors(config, s.infos, path);

  std::vector<unsigned char>& dir = s.dir;
  std::vector<size_t> offset_positions;
  for (const auto& info : s.infos) {
    auto put = [&](const void* p, size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      dir.insert(dir.end(), b, b + n);
    };
    const uint16_t name_len = static_cast<uint16_t>(info.name.size());
    put(&name_len, 2);
    put(info.name.data(), info.name.size());
    const uint8_t dtype = static_cast<uint8_t>(info.dtype), n_dims = static_cast<uint8_t>(info.shape.size());
    put(&dtype, 1);
    put(&n_dims, 1);
    for (uint64_t d : info.shape) put(&d, 8);
    offset_positions.push_back(dir.size());
    dir.resize(dir.size() + 8 + 8);  // offset and size, filled below
    s.crc_positions.push_back(dir.size());
    dir.resize(dir.size() + 4);  // crc32, filled as the data arrives
  }
  uint64_t data_offset, end;
  if (!align_up(kHeaderSize + dir.size(), data_offset)) throw Error(path + ": directory too large");
  end = data_offset;
  for (size_t i = 0; i < s.infos.size(); ++i) {
    TensorInfo& info = s.infos[i];
    if (!align_up(end, info.offset) || __builtin_add_overflow(info.offset, info.size, &end))
      throw Error(path + ": file size overflows");
    std::memcpy(dir.data() + offset_positions[i], &info.offset, 8);
    std::memcpy(dir.data() + offset_positions[i] + 8, &info.size, 8);
  }
  s.file_size = s.tensors_end = end;
  s.config = config;
  encode_header(config, static_cast<uint32_t>(s.infos.size()), dir.size(), data_offset, end, s.header);

  // Header and directory are written last (they hold the CRCs): reserve their bytes now.
  s.out = std::make_unique<TempFile>(path);
  s.out->zeros(kHeaderSize + dir.size());
  s.pos = kHeaderSize + dir.size();
}

WeightFileWriter::~WeightFileWriter() = default;  // TempFile removes the temporary file unless committed

size_t WeightFileWriter::current_tensor() const { return state_->current; }
uint64_t WeightFileWriter::file_size() const { return state_->file_size; }

void WeightFileWriter::append(const void* data, uint64_t size) {
  State& s = *state_;
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    if (s.committed || s.current >= s.infos.size())
      throw Error(s.path + ": more data appended than the declared tensors hold");
    TensorInfo& info = s.infos[s.current];
    if (s.written == 0) {  // first bytes of this tensor: pad up to its offset
      s.out->zeros(info.offset - s.pos);
      s.pos = info.offset;
    }
    const uint64_t n = std::min(size, info.size - s.written);
    info.crc32 = crc32(p, n, info.crc32);
    s.out->write(p, n);
    s.pos += n;
    s.written += n;
    p += n;
    size -= n;
    if (s.written == info.size) {
      ++s.current;
      s.written = 0;
    }
  }
}

void WeightFileWriter::set_tokenizer(const TokenizerSpec& spec) {
  State& s = *state_;
  if (s.committed) throw Error(s.path + ": already committed");
  const std::string where = s.path + ": tokenizer section";
  spec.validate(where);
  check_tokenizer_fits(spec, s.config, where);
  std::vector<unsigned char> bytes = serialize_tokenizer(spec);
  if (bytes.size() > UINT32_MAX) throw Error(where + ": " + std::to_string(bytes.size()) + " bytes (at most 4 GiB)");
  uint64_t offset;
  if (!align_up(s.tensors_end, offset) || offset > UINT64_MAX - bytes.size()) throw Error(where + ": offset overflows");
  const uint32_t size = static_cast<uint32_t>(bytes.size()), crc = crc32(bytes.data(), bytes.size());
  s.file_size = offset + size;
  s.tokenizer_section = std::move(bytes);
  auto put32 = [&](uint64_t at, uint32_t v) { std::memcpy(s.header + at, &v, 4); };
  put32(header_at::version, kVersionTokenizer);
  std::memcpy(s.header + header_at::file_size, &s.file_size, 8);
  std::memcpy(s.header + header_at::tokenizer_offset, &offset, 8);
  put32(header_at::tokenizer_size, size);
  put32(header_at::tokenizer_crc32, crc);
}

void WeightFileWriter::commit() {
  State& s = *state_;
  if (s.committed) throw Error(s.path + ": already committed");
  if (s.current < s.infos.size())
    throw Error(s.path + ": tensor '" + quote_name(s.infos[s.current].name) + "': data incomplete (" +
                std::to_string(s.written) + " of " + std::to_string(s.infos[s.current].size) + " bytes)");
  if (s.config.tokenizer == TokenizerKind::bpe && s.tokenizer_section.empty())
    throw Error(s.path + ": the config's tokenizer is bpe but no tokenizer was given (set_tokenizer)");
  if (!s.tokenizer_section.empty()) {
    s.out->zeros(s.file_size - s.tokenizer_section.size() - s.pos);
    s.out->write(s.tokenizer_section.data(), s.tokenizer_section.size());
    s.pos = s.file_size;
  }
  for (size_t i = 0; i < s.infos.size(); ++i) std::memcpy(s.dir.data() + s.crc_positions[i], &s.infos[i].crc32, 4);
  const uint32_t crc = header_crc(s.header, s.dir.data(), s.dir.size());
  std::memcpy(s.header + header_at::header_crc32, &crc, 4);
  s.out->write_at(0, s.header, kHeaderSize);
  s.out->write_at(kHeaderSize, s.dir.data(), s.dir.size());
  s.out->commit();
  s.committed = true;
}

void write_weight_file(const std::string& path, const ModelConfig& config, const std::vector<TensorToWrite>& tensors,
                       const TokenizerSpec* tokenizer) {
  std::vector<TensorToDeclare> declared;
  declared.reserve(tensors.size());
  for (const auto& t : tensors) declared.push_back({t.name, t.dtype, t.shape});
  for (const auto& t : tensors)
    if (t.data == nullptr) throw Error(path + ": tensor '" + quote_name(t.name) + "': no data");
  WeightFileWriter writer(path, config, declared);
  for (size_t i = 0; i < tensors.size(); ++i) {
    writer.append(tensors[i].data, tensor_bytes(tensors[i].dtype, tensors[i].shape));  // checked by the constructor
  }
  if (tokenizer) writer.set_tokenizer(*tokenizer);
  writer.commit();
}

}  // namespace sqrtdk
