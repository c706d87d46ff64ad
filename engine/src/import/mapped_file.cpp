// MappedFile: open, map, pread (see mapped_file.h).
#include "engine/src/import/mapped_file.h"

#include <sqrtdk/error.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sqrtdk {
namespace {
Error mapped_file_error(const std::string& message) { return Error(ErrorKind::bad_file, message); }
}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO planted under the file's name must not hang the open (fstat then refuses it).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw mapped_file_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw mapped_file_error(path + ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd_);
      throw mapped_file_error(path + ": cannot map: " + std::strerror(err));
    }
    bytes_ = static_cast<const unsigned char*>(map);
    owns_map_ = true;
  }
}

MappedFile::MappedFile(const unsigned char* bytes, uint64_t size, std::string where)
    : path_(std::move(where)), bytes_(bytes), size_(size) {}

MappedFile::~MappedFile() {
  if (owns_map_) ::munmap(const_cast<unsigned char*>(bytes_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::read(uint64_t offset, uint64_t size, void* dst) const {
  if (offset > size_ || size > size_ - offset) throw mapped_file_error(path_ + ": read past the end of the file");
  auto* p = static_cast<unsigned char*>(dst);
  if (fd_ < 0) {  // the caller's bytes
    if (size) std::memcpy(p, bytes_ + offset, size);
    return;
  }
  while (size > 0) {
    const ssize_t n = ::pread(fd_, p, size > (uint64_t{1} << 30) ? (size_t{1} << 30) : size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw mapped_file_error(path_ + ": read failed at offset " + std::to_string(offset) + ": " +
                     (n < 0 ? std::strerror(errno) : "the file is shorter than when it was opened"));
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
}

}  // namespace sqrtdk
