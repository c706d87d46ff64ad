// The C++ .sqdk writer (spec: engine/FORMAT.md; byte-identical to tools/sqdk.py for the same content).
//
// Layout: header (128 B), directory entries in the given order, zero padding to a multiple of 64, then each
// tensor's data at the next multiple of 64 with zero padding between; file_size = end of the last tensor.
// The content is validated with the loader's rules first. The bytes go to "<path>.tmp-<pid>-<n>" in the same
// folder (O_EXCL), are fsynced, renamed over `path`, and the folder is fsynced: a killed writer leaves at most a
// temporary file, never a partial file under the final name.
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>

#include "engine/src/format_internal.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sqrtdk {

using namespace format_detail;

namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& final_path) : final_(final_path) {
    static std::atomic<uint64_t> counter{0};  // unique temp names across threads of one process
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      tmp_ = final_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) throw Error(final_ + ": cannot create a temporary file beside it: " + std::strerror(errno));
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
  void zeros(uint64_t n) {
    static const unsigned char z[64] = {};
    while (n > 0) {
      const uint64_t k = n < 64 ? n : 64;
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

void write_weight_file(const std::string& path, const ModelConfig& config, const std::vector<TensorToWrite>& tensors) {
  config.validate(path);
  if (tensors.size() > UINT32_MAX) throw Error(path + ": too many tensors");

  // Directory entries and data layout, with the loader's checks.
  std::vector<TensorInfo> infos;
  infos.reserve(tensors.size());
  std::unordered_set<std::string_view> names;
  std::vector<unsigned char> dir;
  for (const auto& t : tensors) {
    const std::string where = path + ": tensor '" + quote_name(t.name) + "': ";
    if (std::string problem = name_problem(t.name); !problem.empty()) throw Error(where + problem);
    if (!names.insert(t.name).second) throw Error(where + "duplicate name");
    if (static_cast<uint8_t>(t.dtype) > 2) throw Error(where + "unknown dtype");
    if (t.shape.empty() || t.shape.size() > kMaxDims) throw Error(where + "n_dims must be 1..4");
    uint64_t n = 1;
    for (uint64_t d : t.shape)
      if (d == 0 || __builtin_mul_overflow(n, d, &n)) throw Error(where + "zero or overflowing dimension");
    TensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.shape;
    if (__builtin_mul_overflow(n, uint64_t{dtype_size(t.dtype)}, &info.size)) throw Error(where + "size overflows");
    if (t.data == nullptr) throw Error(where + "no data");
    info.crc32 = crc32(t.data, info.size);
    infos.push_back(std::move(info));
  }
  check_family_tensors(config, infos, path);

  for (const auto& info : infos) {
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
    dir.resize(dir.size() + 8 + 8);  // offset and size, filled below
    put(&info.crc32, 4);
  }
  uint64_t data_offset, end;
  if (!align_up(kHeaderSize + dir.size(), data_offset)) throw Error(path + ": directory too large");
  end = data_offset;
  size_t entry = 0;
  for (auto& info : infos) {
    if (!align_up(end, info.offset) || __builtin_add_overflow(info.offset, info.size, &end))
      throw Error(path + ": file size overflows");
    entry += 2 + info.name.size() + 2 + 8 * info.shape.size();
    std::memcpy(dir.data() + entry, &info.offset, 8);
    std::memcpy(dir.data() + entry + 8, &info.size, 8);
    entry += 8 + 8 + 4;
  }

  unsigned char header[kHeaderSize];
  encode_header(config, static_cast<uint32_t>(infos.size()), dir.size(), data_offset, end, header);
  const uint32_t header_crc = crc32(dir.data(), dir.size(), crc32(header, kHeaderCrcOffset));
  std::memcpy(header + kHeaderCrcOffset, &header_crc, 4);

  TempFile out(path);
  out.write(header, kHeaderSize);
  out.write(dir.data(), dir.size());
  uint64_t pos = kHeaderSize + dir.size();
  for (size_t i = 0; i < infos.size(); ++i) {
    out.zeros(infos[i].offset - pos);
    out.write(tensors[i].data, infos[i].size);
    pos = infos[i].offset + infos[i].size;
  }
  out.commit();
}

}  // namespace sqrtdk
