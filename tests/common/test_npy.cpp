// tests/common/npy.h against a golden fixture written by NumPy (tools/make_golden.py), and its error paths.
#include <doctest/doctest.h>

#include "tests/common/npy.h"
#include "tests/common/close.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using sqrtdk::test::NpyF32;
using sqrtdk::test::read_npy_f32;

namespace {
const std::string kGolden = std::string(SQRTDK_TEST_DATA_DIR) + "/golden/";
}

TEST_CASE("npy: reads a golden logits file with the shape its fixture.json states") {
  std::ifstream f(kGolden + "llama_gqa/fixture.json");
  REQUIRE(f);
  const nlohmann::json fixture = nlohmann::json::parse(f);
  const NpyF32 logits = read_npy_f32(kGolden + "llama_gqa/" + fixture["files"]["logits"].get<std::string>());
  const auto expected_shape = fixture["files"]["logits_shape"].get<std::vector<size_t>>();
  CHECK(logits.shape == expected_shape);
  REQUIRE(logits.size() == expected_shape[0] * expected_shape[1]);
  // The last prompt row's argmax is the first greedy token PyTorch generated.
  const size_t last = logits.shape[0] - 1, n_vocab = logits.shape[1];
  const float* row = logits.row(last);
  const size_t argmax = static_cast<size_t>(std::max_element(row, row + n_vocab) - row);
  CHECK(argmax == fixture["generated"][0].get<size_t>());
  // logits_full repeats the prompt rows (same model, longer sequence) up to float reassociation.
  const NpyF32 full = read_npy_f32(kGolden + "llama_gqa/logits_full.npy");
  REQUIRE(full.shape.size() == 2);
  CHECK(full.shape[1] == n_vocab);
  for (size_t t = 0; t < logits.shape[0]; ++t)
    for (size_t v = 0; v < n_vocab; ++v)  // a logit is a float dot product: its reassociation error scales with
                                          // the terms, not the result (logits near 0), so the bound is absolute
      SQRTDK_CHECK_ABS(full.at(t, v), logits.at(t, v), 1e-4, "float reassociation; |logits| <= 8.4, mean 1.9 here");
}

TEST_CASE("npy: malformed files are errors naming the file") {
  const std::string path = (std::filesystem::temp_directory_path() / "sqrtdk_test_npy_bad.npy").string();
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  auto header = [](const std::string& dict) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xFF) + char(h.size() >> 8) + h;
  };
  write("not numpy");
  CHECK_THROWS_WITH(read_npy_f32(path), doctest::Contains("bad magic"));
  write(header("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }") + std::string(16, '\0'));
  CHECK_THROWS_WITH(read_npy_f32(path), doctest::Contains("expected '<f4'"));
  write(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") + std::string(20, '\0'));
  CHECK_THROWS_WITH(read_npy_f32(path), doctest::Contains("expected 24"));
  write(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }") + std::string(12, '\0'));
  const NpyF32 ok = read_npy_f32(path);
  CHECK(ok.shape == std::vector<size_t>{3});
  CHECK(ok.data == std::vector<float>{0, 0, 0});
  std::remove(path.c_str());
  CHECK_THROWS_WITH(read_npy_f32(path), doctest::Contains("cannot open"));
}
