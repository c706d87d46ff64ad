// AlignedBuffer<T>: an owning, 64-byte aligned array for weights, activations and scratch.
//
// Why not std::vector: kernels want 64-byte alignment (one cache line, one zmm register), and on this machine the
// first touch of a 4 KiB page costs about 12 us, so large buffers are 2 MiB aligned and marked MADV_HUGEPAGE
// (about 50x cheaper to fault in). Allocate once (at load or session creation), reuse across calls.
// Contents are uninitialized unless zero() is called. Allocation failure throws sqrtdk::Error (kind out_of_memory) with the size.
#pragma once

#include <sqrtdk/error.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include <sys/mman.h>

namespace sqrtdk {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) { allocate(count); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept { swap(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    AlignedBuffer tmp(std::move(other));
    swap(tmp);
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  void swap(AlignedBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }

  // Replaces the contents with `count` uninitialized elements (no-op if the size is unchanged).
  void allocate(size_t count) {
    if (count == size_ && data_ != nullptr) return;
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    if (count == 0) return;
    if (count > std::numeric_limits<size_t>::max() / sizeof(T) - kHugePage)
      throw Error(ErrorKind::out_of_memory, "allocation of " + std::to_string(count) + " elements overflows size_t");
    // Large buffers start on a 2 MiB boundary and their whole huge pages are marked MADV_HUGEPAGE; the tail past the
    // last whole huge page stays on 4 KiB pages, so no buffer carries up to 2 MiB of resident padding (it did: ~50
    // MB over a 110M-parameter model's packed weights).
    const size_t bytes = (count * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
    const size_t align = bytes >= kHugePage ? kHugePage : kAlignment;
    void* p = nullptr;
    if (posix_memalign(&p, align, bytes) != 0 || p == nullptr)
      throw Error(ErrorKind::out_of_memory, "out of memory allocating " + std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
    if (align == kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
    data_ = static_cast<T*>(p);
    size_ = count;
  }

  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sqrtdk
