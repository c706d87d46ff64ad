// Whether this test binary runs under a sanitizer (ASan, TSan, MSan): for the few tests that cannot run there (an
// address-space cap: the runtimes reserve terabytes of shadow memory) or that run a smaller workload there (the
// instrumented build is 3-10x slower, and CI runs the suite under two sanitizers). A test that shrinks its workload
// under a sanitizer still asserts the same properties; the release build runs the full size.
#pragma once

namespace sqrtdk::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace sqrtdk::test
