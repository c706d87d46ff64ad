// sqrtdk::Error kinds: the API (kind, name, the untagged default), which status the C API gives each kind (the
// mapping reads the kind, never the message), and that the sites that know their kind say it: every .sqdk and
// safetensors reader error is bad_file, an allocation failure out_of_memory, a full context context_full.
// The reader's many individual checks are covered through expect_load_error (test_format_util.h), which also checks
// the kind.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>
#include <sqrtdk/sqrtdk.h>

#include "engine/src/capi/c_api_internal.h"
#include "engine/src/format/format_internal.h"
#include "engine/src/import/safetensors.h"
#include "ops/base/aligned_buffer.h"
#include "tests/common/toy_model.h"
#include "tests/engine/test_format_util.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace sqrtdk;
namespace header_at = sqrtdk::format_detail::header_at;

namespace {

constexpr ErrorKind kAllKinds[] = {ErrorKind::bad_input,     ErrorKind::bad_file,    ErrorKind::context_full,
                                   ErrorKind::out_of_memory, ErrorKind::unsupported, ErrorKind::internal};

}  // namespace

TEST_CASE("error kinds: Error carries its kind and message; untagged errors are bad_input") {
  const Error untagged("prefill: no tokens");
  CHECK(untagged.kind() == ErrorKind::bad_input);
  CHECK(std::string(untagged.what()) == "prefill: no tokens");
  for (ErrorKind kind : kAllKinds) {
    const Error e(kind, "x.sqdk: header: bad magic");
    CHECK(e.kind() == kind);
    CHECK(std::string(e.what()) == "x.sqdk: header: bad magic");  // the kind is not added to the message
  }
  CHECK(std::string(error_kind_name(ErrorKind::bad_input)) == "bad_input");
  CHECK(std::string(error_kind_name(ErrorKind::bad_file)) == "bad_file");
  CHECK(std::string(error_kind_name(ErrorKind::context_full)) == "context_full");
  CHECK(std::string(error_kind_name(ErrorKind::out_of_memory)) == "out_of_memory");
  CHECK(std::string(error_kind_name(ErrorKind::unsupported)) == "unsupported");
  CHECK(std::string(error_kind_name(ErrorKind::internal)) == "internal");
  // Still a std::runtime_error for callers that catch those.
  CHECK_THROWS_AS(throw Error(ErrorKind::internal, "x"), std::runtime_error);
}

TEST_CASE("error kinds: the C API maps each kind to one status, by kind alone") {
  CHECK(capi::status_of(ErrorKind::bad_input) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(capi::status_of(ErrorKind::bad_file) == SQRTDK_ERR_BAD_FILE);
  CHECK(capi::status_of(ErrorKind::context_full) == SQRTDK_ERR_CONTEXT_FULL);
  CHECK(capi::status_of(ErrorKind::out_of_memory) == SQRTDK_ERR_OUT_OF_MEMORY);
  CHECK(capi::status_of(ErrorKind::unsupported) == SQRTDK_ERR_UNSUPPORTED);
  CHECK(capi::status_of(ErrorKind::internal) == SQRTDK_ERR_INTERNAL);
  // The numbers are ABI: appended, never renumbered. Every status has its own name.
  CHECK(SQRTDK_ERR_INTERNAL == 5);
  CHECK(SQRTDK_ERR_UNSUPPORTED == 6);
  std::vector<std::string> names;
  for (int s = SQRTDK_OK; s <= SQRTDK_ERR_UNSUPPORTED; ++s) {
    const std::string name = sqrtdk_status_string(static_cast<sqrtdk_status>(s));
    CHECK(name != "unknown status");
    for (const auto& other : names) CHECK(name != other);
    names.push_back(name);
  }
  CHECK(std::string(sqrtdk_status_string(SQRTDK_ERR_UNSUPPORTED)) == "unsupported");
}

TEST_CASE("error kinds: a failed allocation is out_of_memory and names its size") {
  AlignedBuffer<float> b;
  // Past size_t: refused before asking the allocator.
  const size_t absurd = std::numeric_limits<size_t>::max() / sizeof(float);
  try {
    b.allocate(absurd);
    FAIL("allocated " << absurd << " floats");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::out_of_memory);
    CHECK(std::string(e.what()).find(std::to_string(absurd)) != std::string::npos);
  }
  // 2^48 bytes: more than a 47-bit user address space holds, so the allocator refuses it whatever the overcommit.
  try {
    b.allocate(size_t{1} << 46);
    FAIL("allocated 2^48 bytes");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::out_of_memory);
    CHECK(std::string(e.what()).find("out of memory allocating 281474976710656 bytes") != std::string::npos);
  }
  CHECK(b.empty());
}

TEST_CASE("error kinds: everything the .sqdk reader throws is bad_file") {
  test::TempDir dir;
  const std::string good = dir.file("good.sqdk");
  test::write_fixture(test::load_fixture("llama"), good);
  const std::vector<unsigned char> bytes = test::read_bytes(good);

  CHECK(test::kind_thrown([&] { WeightFile::open(dir.file("missing.sqdk")); }) == ErrorKind::bad_file);
  CHECK(test::kind_thrown([&] { WeightFile::open(dir.path().string()); }) == ErrorKind::bad_file);  // a folder

  const std::string bad = dir.file("bad.sqdk");
  test::write_bytes(bad, bytes, 100);  // truncated inside the header
  CHECK(test::kind_thrown([&] { WeightFile::open(bad); }) == ErrorKind::bad_file);

  std::vector<unsigned char> b = bytes;
  b[0] = 'X';  // magic
  test::write_bytes(bad, b);
  CHECK(test::kind_thrown([&] { WeightFile::open(bad); }) == ErrorKind::bad_file);

  // ModelConfig::validate is shared with the writer (where a bad config is bad input); from a file it is bad_file.
  b = bytes;
  test::put<uint32_t>(b, header_at::n_heads, 0);
  test::reseal(b);
  test::write_bytes(bad, b);
  CHECK(test::kind_thrown([&] { WeightFile::open(bad); }) == ErrorKind::bad_file);

  // So is check_family_tensors: a llama file whose header says gpt2 has the wrong tensor set.
  b = bytes;
  test::put<uint32_t>(b, header_at::arch, 0);
  test::put<uint32_t>(b, header_at::n_kv_heads, test::get<uint32_t>(b, header_at::n_heads));
  test::reseal(b);
  test::write_bytes(bad, b);
  CHECK(test::kind_thrown([&] { WeightFile::open(bad); }) == ErrorKind::bad_file);

  // A corrupt tensor (data CRC).
  b = bytes;
  b.back() ^= 1;
  test::write_bytes(bad, b);
  CHECK(test::kind_thrown([&] { WeightFile::open(bad); }) == ErrorKind::bad_file);

  // WeightFile::require: a tensor the caller needs is missing or misshapen in the file.
  const auto wf = WeightFile::open(good);
  CHECK(test::kind_thrown([&] { wf->require("no.such.tensor", {1}); }) == ErrorKind::bad_file);
  CHECK(test::kind_thrown([&] { wf->require(wf->tensors().front().name, {1, 2, 3}); }) == ErrorKind::bad_file);

  // The writer's own argument checks stay bad_input: the caller handed it a bad tensor list.
  const float one = 1.0f;
  const std::vector<TensorToWrite> twice = {{"tok_emb", DType::f32, {1}, &one}, {"tok_emb", DType::f32, {1}, &one}};
  CHECK(test::kind_thrown([&] { write_weight_file(dir.file("out.sqdk"), test::toy_llama_config(), twice); }) ==
        ErrorKind::bad_input);
}

TEST_CASE("error kinds: the safetensors reader's errors are bad_file") {
  const std::vector<unsigned char> garbage = {1, 2, 3};
  CHECK(test::kind_thrown([&] { parse_safetensors(garbage.data(), garbage.size(), "t.safetensors"); }) ==
        ErrorKind::bad_file);
  std::vector<unsigned char> not_json(8 + 4, ' ');
  not_json[0] = 4;  // header_len 4, then "    " (not JSON)
  for (int i = 1; i < 8; ++i) not_json[i] = 0;
  CHECK(test::kind_thrown([&] { parse_safetensors(not_json.data(), not_json.size(), "t.safetensors"); }) ==
        ErrorKind::bad_file);
  test::TempDir dir;
  CHECK(test::kind_thrown([&] { SafetensorsFile::open(dir.file("missing.safetensors")); }) == ErrorKind::bad_file);
}

TEST_CASE("error kinds: the C API statuses of a bad file, bad input and a full context") {
  test::TempDir dir;
  char err[256] = {};
  sqrtdk_model* model = nullptr;
  const std::string bad = dir.file("bad.sqdk");
  test::write_bytes(bad, std::vector<unsigned char>(200, 'x'));
  CHECK(sqrtdk_model_load(bad.c_str(), 1, &model, err, sizeof err) == SQRTDK_ERR_BAD_FILE);
  CHECK(model == nullptr);
  CHECK(std::string(err).find("bad magic") != std::string::npos);

  const std::string path = dir.file("toy.sqdk");
  test::write_toy_model(path, test::toy_llama_config(), 1);
  REQUIRE(sqrtdk_model_load(path.c_str(), 1, &model, err, sizeof err) == SQRTDK_OK);
  sqrtdk_session* s = nullptr;
  REQUIRE(sqrtdk_session_create(model, 4, 1, &s, err, sizeof err) == SQRTDK_OK);
  const uint32_t out_of_vocab = 1000;
  CHECK(sqrtdk_session_decode(s, out_of_vocab, nullptr) == SQRTDK_ERR_INVALID_ARGUMENT);
  const uint32_t five[5] = {1, 2, 3, 4, 5};
  CHECK(sqrtdk_session_prefill(s, five, 5, nullptr) == SQRTDK_ERR_CONTEXT_FULL);
  CHECK(sqrtdk_session_n_past(s) == 0);
  sqrtdk_session_free(s);
  sqrtdk_model_free(model);

  // The C++ side of the same: the session says context_full.
  const auto m = Model::load(path);
  SessionOptions o;
  o.max_context = 4;
  o.n_threads = 1;
  Session session(m, o);
  CHECK(test::kind_thrown([&] { session.prefill(std::vector<uint32_t>{1, 2, 3, 4, 5}); }) == ErrorKind::context_full);
  CHECK(test::kind_thrown([&] { session.prefill(std::vector<uint32_t>{out_of_vocab}); }) == ErrorKind::bad_input);
}
