// Closeness checks whose bound says what it is. doctest's Approx(want).epsilon(e) accepts
// |got - want| <= e * max(|want|, 1) (plus a scale term): for |want| < 1 that is an absolute bound, so
// Approx(2.06e-9).epsilon(1e-5) passes when a kernel returns 0. The tests use these macros instead, each with the
// reason for its tolerance written beside it:
//
//   SQRTDK_CHECK_REL(got, want, rel, why)  |got - want| <= rel * |want|   (want = 0: got must be exactly 0)
//   SQRTDK_CHECK_ULP(got, want, ulp, why)  |got - want| <= ulp units in the last place of want as a float
//                                          (subnormal ulp 2^-149; want = ±inf: got must be the same inf)
//   SQRTDK_CHECK_ABS(got, want, abs, why)  |got - want| <= abs, for results whose error scales with something
//                                          other than the result itself (cancellation: say what `abs` is scaled by)
//
// NaN never passes. Macros (not functions) so a failure reports the caller's file and line; the message gives the
// values, the error, the bound and `why`.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace sqrtdk::test {

// Error of got against the exact value want, in units in the last place of want as a float.
inline double ulp_error(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::numeric_limits<double>::infinity();
  if (std::isinf(want) || std::fabs(want) > std::numeric_limits<float>::max())
    return got == want || (std::isinf(got) && (got > 0) == (want > 0)) ? 0.0 : std::numeric_limits<double>::infinity();
  int exp2 = 0;
  std::frexp(want, &exp2);  // want = m * 2^exp2, |m| in [0.5, 1)
  const double ulp = std::ldexp(1.0, std::max(exp2 - 24, -149));
  return std::fabs(got - want) / ulp;
}

inline bool rel_close(double got, double want, double rel) {
  return std::fabs(got - want) <= rel * std::fabs(want);  // false for NaN
}
inline bool ulp_close(double got, double want, double max_ulp) { return ulp_error(got, want) <= max_ulp; }
inline bool abs_close(double got, double want, double abs) { return std::fabs(got - want) <= abs; }

inline std::string describe_close(const char* kind, double got, double want, double bound, const char* why) {
  std::ostringstream s;
  s.precision(9);
  s << "got " << got << ", want " << want << ": ";
  if (std::string(kind) == "ulp")
    s << ulp_error(got, want) << " ulp > " << bound << " ulp";
  else if (std::string(kind) == "rel")
    s << "relative error " << (want != 0 ? std::fabs(got - want) / std::fabs(want) : std::fabs(got - want)) << " > "
      << bound;
  else
    s << "absolute error " << std::fabs(got - want) << " > " << bound;
  s << " (" << why << ")";
  return s.str();
}

}  // namespace sqrtdk::test

#define SQRTDK_CHECK_REL(got, want, rel, why)                                                                  \
  CHECK_MESSAGE(::sqrtdk::test::rel_close(double(got), double(want), double(rel)),                           \
                ::sqrtdk::test::describe_close("rel", double(got), double(want), double(rel), why))
#define SQRTDK_CHECK_ULP(got, want, ulp, why)                                                                  \
  CHECK_MESSAGE(::sqrtdk::test::ulp_close(double(got), double(want), double(ulp)),                           \
                ::sqrtdk::test::describe_close("ulp", double(got), double(want), double(ulp), why))
#define SQRTDK_CHECK_ABS(got, want, abs, why)                                                                  \
  CHECK_MESSAGE(::sqrtdk::test::abs_close(double(got), double(want), double(abs)),                           \
                ::sqrtdk::test::describe_close("abs", double(got), double(want), double(abs), why))
