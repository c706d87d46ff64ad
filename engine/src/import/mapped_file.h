// A model file the importers read: opened read-only, mapped whole, its descriptor kept for read(). One place for
// what both the GGUF and the safetensors reader need of a path they are given: a FIFO or device under the name is
// refused without hanging, a failed map is an error, and a copy by pread survives EINTR and reports a file
// truncated after it was opened.
#pragma once

#include <cstdint>
#include <string>

namespace sqrtdk {

class MappedFile {
 public:
  // Opens and maps `path`. Throws sqrtdk::Error (kind bad_file): "<path>: cannot open: <reason>", "<path>: not a
  // regular file", "<path>: cannot map: <reason>". An empty file maps to no bytes (bytes() is null, size() 0).
  explicit MappedFile(const std::string& path);
  // Bytes the caller holds and keeps alive for this object's lifetime (fuzzing, tests); read() copies from them.
  MappedFile(const unsigned char* bytes, uint64_t size, std::string where);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* bytes() const { return bytes_; }
  uint64_t size() const { return size_; }

  // Copies [offset, offset + size) of the file into dst: pread for an opened file, in calls of at most 1 GiB (the
  // importers stream tensors this way rather than through the mapping: on this VM the first touch of a mapped page
  // costs microseconds, engine/src/import/hf_import.cpp has the figures). Throws (bad_file) for a range past the
  // end or a short read.
  void read(uint64_t offset, uint64_t size, void* dst) const;

 private:
  std::string path_;
  const unsigned char* bytes_ = nullptr;
  uint64_t size_ = 0;
  bool owns_map_ = false;
  int fd_ = -1;
};

}  // namespace sqrtdk
