// The C API's one piece of policy, for tests: which status each sqrtdk::ErrorKind becomes. Not a public header.
#pragma once

#include <sqrtdk/error.h>
#include <sqrtdk/sqrtdk.h>

namespace sqrtdk::capi {

// bad_input → INVALID_ARGUMENT, bad_file → BAD_FILE, context_full → CONTEXT_FULL, out_of_memory → OUT_OF_MEMORY,
// unsupported → UNSUPPORTED, internal → INTERNAL. (std::bad_alloc is OUT_OF_MEMORY; any other exception INTERNAL.)
sqrtdk_status status_of(ErrorKind kind);

}  // namespace sqrtdk::capi
