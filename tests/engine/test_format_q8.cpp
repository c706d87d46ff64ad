// q8 (GGUF block_q8_0) and native bf16 weights in .sqdk: the format (round trip, sizes, errors, Python writer
// parity), the loader (bf16/q8 layers packed natively, through the C API), `convert` of a .sqdk to bf16/q8, GGUF
// Q8_0 import block for block, `inspect`.
#include "tests/common/files.h"
#include "tests/engine/test_format_util.h"

#include <sqrtdk/convert.h>
#include <sqrtdk/model.h>
#include <sqrtdk/sqrtdk.h>

#include "ops/gemm/gemm.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <sys/wait.h>

using namespace sqrtdk;
using namespace sqrtdk::test;

namespace {

const std::string kBundled = SQRTDK_SOURCE_DIR "/models/tiny-llama-bytes.sqdk";

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// The logits of every position of `tokens` through the C API (prefill one token at a time).
std::vector<std::vector<float>> c_api_logits(const std::string& path, const std::vector<uint32_t>& tokens) {
  sqrtdk_model* model = nullptr;
  char error[512] = {};
  REQUIRE_MESSAGE(sqrtdk_model_load(path.c_str(), 1, &model, error, sizeof error) == SQRTDK_OK, error);
  sqrtdk_model_config config{};
  REQUIRE(sqrtdk_model_get_config(model, &config) == SQRTDK_OK);
  sqrtdk_session* session = nullptr;
  REQUIRE_MESSAGE(sqrtdk_session_create(model, 0, 1, &session, error, sizeof error) == SQRTDK_OK, error);
  std::vector<std::vector<float>> out;
  for (uint32_t t : tokens) {
    const float* logits = nullptr;
    REQUIRE(sqrtdk_session_prefill(session, &t, 1, &logits) == SQRTDK_OK);
    out.emplace_back(logits, logits + config.n_vocab);
  }
  sqrtdk_session_free(session);
  sqrtdk_model_free(model);
  return out;
}

}  // namespace

TEST_CASE("format q8: tensor_bytes and dtype names") {
  CHECK(parse_dtype("q8") == DType::q8);
  CHECK(std::string(dtype_name(DType::q8)) == "q8");
  CHECK(tensor_bytes(DType::q8, {3, 64}) == 3 * 2 * 34);
  CHECK(tensor_bytes(DType::bf16, {3, 5}) == 30);
  CHECK(tensor_bytes(DType::f32, {7}) == 28);
  const std::string e = error_of([] { tensor_bytes(DType::q8, {4, 48}, "m.sqdk", "blk.0.attn_q.weight"); });
  CHECK(e.find("m.sqdk") != std::string::npos);
  CHECK(e.find("blk.0.attn_q.weight") != std::string::npos);
  CHECK(e.find("[4, 48]") != std::string::npos);
  CHECK(e.find("multiple of 32") != std::string::npos);
  CHECK_THROWS_AS(dtype_size(DType::q8), Error);  // no per-element size: a caller must not size q8 by elements
}

TEST_CASE("format q8: round trip through the writer and reader") {
  const Fixture fx = load_fixture("q8");
  TempDir dir;
  const std::string path = dir.file("q8.sqdk");
  write_fixture(fx, path);
  LoadOptions opts;
  opts.check_finite = true;
  const auto wf = WeightFile::open(path, opts);
  size_t n_q8 = 0;
  for (const FixtureTensor& ft : fx.tensors) {
    INFO(ft.name);
    const TensorInfo& t = wf->require(ft.name, ft.shape);
    CHECK(t.dtype == ft.dtype);
    REQUIRE(t.size == ft.encoded.size());
    CHECK(std::memcmp(wf->data(t), ft.encoded.data(), t.size) == 0);  // the stored bytes are the blocks given
    std::vector<float> got(t.n_elements());
    wf->read_f32(t, got.data());
    if (t.dtype != DType::q8) continue;
    ++n_q8;
    CHECK(t.size == t.n_elements() / 32 * 34);
    const auto* blocks = reinterpret_cast<const ops::Q8Block*>(ft.encoded.data());
    for (size_t i = 0; i < got.size(); ++i) {
      const ops::Q8Block& b = blocks[i / 32];
      const float d = f16_to_f32(b.scale_f16);
      REQUIRE(got[i] == d * b.q[i % 32]);  // read_f32 dequantizes: scale·q exactly
      // The quantization is to the nearest multiple of d (x/d rounded, |q| ≤ 127 by construction of d).
      REQUIRE(std::abs(got[i] - ft.values[i]) <= 0.5f * d * (1 + 1e-6f));
    }
  }
  CHECK(n_q8 == 8);  // tests/data/format_q8.json: tok_emb and the 7 linear weights
  CHECK(wf->count_nonfinite(wf->tensors()[0]) == 0);
}

TEST_CASE("format q8: sizes, shapes and scales the loader refuses") {
  const Fixture fx = load_fixture("q8");
  TempDir dir;
  const std::string good = dir.file("good.sqdk");
  write_fixture(fx, good);
  const std::vector<unsigned char> bytes = read_bytes(good);
  const auto entries = parse_entries(bytes);
  const EntryPos& q = entry(entries, "blk.0.attn_q.weight");  // [32, 32] q8: 32 blocks, 1088 bytes

  SUBCASE("size field of a q8 tensor off by one block") {
    auto b = bytes;
    put<uint64_t>(b, q.size, 1088 - 34);
    reseal(b);
    const std::string p = dir.file("size.sqdk");
    write_bytes(p, b);
    expect_load_error(p, {"blk.0.attn_q.weight", "1054", "expected 1088 bytes for q8"});
  }
  SUBCASE("size computed as if 1 byte per element") {
    auto b = bytes;
    put<uint64_t>(b, q.size, 1024);
    reseal(b);
    const std::string p = dir.file("bytes.sqdk");
    write_bytes(p, b);
    expect_load_error(p, {"blk.0.attn_q.weight", "expected 1088 bytes", "34-byte blocks"});
  }
  SUBCASE("file truncated") {
    const std::string p = dir.file("trunc.sqdk");
    write_bytes(p, bytes, bytes.size() - 40);
    expect_load_error(p, {"file_size says", "truncated"});
  }
  SUBCASE("a q8 block's bytes corrupted: the CRC names the tensor") {
    auto b = bytes;
    b[get<uint64_t>(b, q.offset) + 5] ^= 0x10;
    const std::string p = dir.file("crc.sqdk");
    write_bytes(p, b);
    expect_load_error(p, {"blk.0.attn_q.weight", "checksum mismatch"});
  }
  SUBCASE("a q8 tensor whose last dimension is not a multiple of 32") {
    // attn_norm is f32 [32]; retype it as q8 [32] is fine, so use the bf16 lm_head [260, 32] -> q8 with shape
    // changed to [520, 16] (same element count): the loader names the tensor and the shape.
    auto b = bytes;
    const EntryPos& head = entry(entries, "lm_head.weight");
    b[head.dtype] = 3;
    put<uint64_t>(b, head.shape, 520);
    put<uint64_t>(b, head.shape + 8, 16);
    reseal(b);
    const std::string p = dir.file("shape.sqdk");
    write_bytes(p, b);
    expect_load_error(p, {"lm_head.weight", "[520, 16]", "not a multiple of 32"});
  }
  SUBCASE("a NaN scale: check_finite counts its block's 32 values") {
    auto b = bytes;
    const uint64_t at = get<uint64_t>(b, q.offset) + 34;  // the second block's scale
    put<uint16_t>(b, at, 0x7E00);
    const std::string p = dir.file("nan.sqdk");
    write_bytes(p, b);
    LoadOptions no_crc;
    no_crc.verify_checksums = false;
    no_crc.check_finite = true;
    expect_load_error(p, {"blk.0.attn_q.weight", "32 of 1024 values are NaN or Inf"}, no_crc);
  }
  SUBCASE("the writer refuses a q8 tensor whose last dimension is not a multiple of 32") {
    Fixture bad = load_fixture("llama");  // d_model 8
    for (auto& t : bad.tensors)
      if (t.name == "blk.0.attn_q.weight") t.dtype = DType::q8;
    std::vector<TensorToWrite> tw;
    for (const auto& t : bad.tensors) tw.push_back({t.name, t.dtype, t.shape, t.encoded.data()});
    const std::string p = dir.file("w.sqdk");
    const std::string e = error_of([&] { write_weight_file(p, bad.config, tw); });
    INFO(e);
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("blk.0.attn_q.weight") != std::string::npos);
    CHECK(e.find("[16, 8]") != std::string::npos);
    CHECK(e.find("not a multiple of 32") != std::string::npos);
    CHECK(!std::filesystem::exists(p));
  }
}

TEST_CASE("format q8: tools/sqdk.py writes q8 byte-identical to the C++ writer") {
  TempDir dir;
  const std::string py = dir.file("q8_py.sqdk"), cpp = dir.file("q8_cpp.sqdk");
  if (run_shell(kPython + " " SQRTDK_SOURCE_DIR "/tools/sqdk.py from-spec " + fixture_spec_path("q8") + " " + py + " 2>" +
          dir.file("err.txt")) != 0) {
    if (run_shell(kPython + " -c 'import numpy' >/dev/null 2>&1") != 0) {
      MESSAGE("skipped: " << kPython << " cannot import numpy (install python3-numpy to run this check)");
      return;
    }
    FAIL("tools/sqdk.py failed: " << slurp(dir.file("err.txt")));
  }
  write_fixture(load_fixture("q8"), cpp);
  const auto a = read_bytes(py), b = read_bytes(cpp);
  REQUIRE(a.size() == b.size());
  size_t first_diff = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      first_diff = i;
      break;
    }
  CHECK_MESSAGE(first_diff == a.size(), "first differing byte at offset " << first_diff);

  // Values that hit the rounding rules: ties (x/d = k + 0.5 for the f16-rounded d), the clamp, zero blocks,
  // subnormal scales. Python quantizes them as ops::quantize_row_q8 does.
  std::vector<float> x(32 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) * (i % 7 == 0 ? 3.0f : 1.0f);
  for (size_t i = 32; i < 64; ++i) x[i] = 0;                          // an all-zero block
  for (size_t i = 64; i < 96; ++i) x[i] = 1e-9f * float(int(i) - 80);  // scale below f16's normal range
  for (size_t i = 96; i < 128; ++i) x[i] = (float(i % 8) + 0.5f) / 127.0f * 127.0f;  // .5 steps: ties
  x[100] = 7.5f;
  std::vector<ops::Q8Block> want(x.size() / 32);
  ops::quantize_row_q8(x.data(), x.size(), want.data());
  const std::string in = dir.file("x.f32"), out = dir.file("x.q8");
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * 4));
  }
  const std::string script = "import sys, numpy as np; sys.path.insert(0, '" SQRTDK_SOURCE_DIR "/tools'); "
                             "import sqdk; open('" + out + "', 'wb').write(sqdk.quantize_q8(np.fromfile('" + in +
                             "', dtype='<f4')).tobytes())";
  REQUIRE(run_shell(kPython + " -c \"" + script + "\"") == 0);
  const auto got = read_bytes(out);
  REQUIRE(got.size() == want.size() * 34);
  CHECK(std::memcmp(got.data(), want.data(), got.size()) == 0);
}

TEST_CASE("convert .sqdk -> bf16 and q8: the bundled model loads natively, runs through the C API, logits close") {
  TempDir dir;
  const std::string bf16_path = dir.file("bf16.sqdk"), q8_path = dir.file("q8.sqdk");
  ConvertOptions bf16;
  bf16.dtype = DType::bf16;
  const ConvertResult rb = convert_sqdk(kBundled, bf16_path, bf16);
  CHECK(rb.dtype == DType::bf16);
  ConvertOptions q8;
  q8.dtype = DType::q8;
  const ConvertResult rq = convert_sqdk(kBundled, q8_path, q8);
  CHECK(rq.dtype == DType::q8);
  CHECK(rq.head_dtype == DType::q8);  // default: the same as --dtype

  const auto src = WeightFile::open(kBundled);
  const auto fb = WeightFile::open(bf16_path), fq = WeightFile::open(q8_path);
  REQUIRE(fq->tensors().size() == src->tensors().size());
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const TensorInfo& s = src->tensors()[i];
    CAPTURE(s.name);
    CHECK(fb->tensors()[i].dtype == DType::bf16);  // --dtype bf16: every tensor, norms too (as convert always did)
    // --dtype q8: matrices q8 (tok_emb too: --head-dtype defaults to q8), norms f32 and bit-identical.
    const TensorInfo& q = fq->tensors()[i];
    CHECK(q.dtype == (s.shape.size() == 2 ? DType::q8 : DType::f32));
    CHECK(q.name == s.name);
    CHECK(q.shape == s.shape);
    if (q.dtype == DType::f32) CHECK(std::memcmp(fq->data(q), src->data(s), s.size) == 0);
    if (q.dtype == DType::q8) {  // the blocks quantize_row_q8 makes of the f32 rows
      std::vector<float> x(s.n_elements());
      src->read_f32(s, x.data());
      std::vector<ops::Q8Block> want(x.size() / 32);
      ops::quantize_row_q8(x.data(), x.size(), want.data());
      CHECK(std::memcmp(fq->data(q), want.data(), q.size) == 0);
    }
  }
  CHECK(fq->tokenizer() == nullptr);
  CHECK(fq->config().tokenizer == src->config().tokenizer);

  // The loader packs them in their type.
  const auto mq = Model::load(q8_path), mb = Model::load(bf16_path), mf = Model::load(kBundled);
  const auto types = [](const Model& m) {
    std::string s;
    for (const auto& [type, bytes] : m.packed_bytes_by_type()) s += type + (bytes ? "+" : "0");
    return s;
  };
  CHECK(types(*mq) == "q8+");  // every linear and the tied head (tok_emb, q8)
  CHECK(types(*mb) == "bf16+");
  CHECK(types(*mf) == "f32+");
  MESSAGE("packed bytes: f32 " << mf->packed_bytes() << ", bf16 " << mb->packed_bytes() << ", q8 " << mq->packed_bytes());
  CHECK(mq->packed_bytes() < mb->packed_bytes());
  CHECK(mb->packed_bytes() < mf->packed_bytes());

  // Forward passes through the C API (no change for the caller), 24 positions of byte tokens.
  std::vector<uint32_t> tokens = {256};
  for (char c : std::string("The quick brown fox jumps")) tokens.push_back(static_cast<unsigned char>(c));
  const auto ref = c_api_logits(kBundled, tokens), lb = c_api_logits(bf16_path, tokens),
             lq = c_api_logits(q8_path, tokens);
  double max_logit = 0, err_b = 0, err_q = 0;
  for (size_t p = 0; p < ref.size(); ++p)
    for (size_t v = 0; v < ref[p].size(); ++v) {
      max_logit = std::max(max_logit, std::fabs(double{ref[p][v]}));
      err_b = std::max(err_b, std::fabs(double{lb[p][v]} - ref[p][v]));
      err_q = std::max(err_q, std::fabs(double{lq[p][v]} - ref[p][v]));
    }
  // Bounds, first order: each of the 29 matmuls on the path (4 blocks x q, k, v, out, gate, up, down, and the tied
  // head) multiplies with weights off by at most a relative u of their scale, so the logits move by at most
  // 29 u max|logit|. bf16 weights: u = 2^-9 (half an ulp of 8 significant bits), plus on avx512_bf16 the activation
  // rounded to bf16 (another 2^-9). q8: u = 0.5/127 (q rounding) + 2^-11 (the f16 scale) for the weights, plus
  // 0.5/127 for the activation row quantized to int8. The embeddings are quantized the same way (one more u).
  // Worst cases: the roundings are independent and mostly cancel (the measured error is printed).
  const double bound_b = 30 * 2 * std::ldexp(1.0, -9) * max_logit;
  const double bound_q = 30 * (1.0 / 127 + std::ldexp(1.0, -11)) * max_logit;
  MESSAGE("bundled model, max |logit| " << max_logit << ": bf16 max abs error " << err_b << " (bound " << bound_b
                                        << "), q8 " << err_q << " (bound " << bound_q << ")");
  CHECK(err_b <= bound_b);
  CHECK(err_q <= bound_q);
  CHECK(err_b > 0);  // the bf16 and q8 files are really other models (the check can fail)
  CHECK(err_q > 0);
  // The greedy next token agrees at most positions (a sanity check on top of the bound).
  size_t same_q = 0;
  for (size_t p = 0; p < ref.size(); ++p)
    same_q += std::max_element(ref[p].begin(), ref[p].end()) - ref[p].begin() ==
              std::max_element(lq[p].begin(), lq[p].end()) - lq[p].begin();
  MESSAGE("q8: greedy token equal at " << same_q << " of " << ref.size() << " positions");
}

TEST_CASE("convert .sqdk: --head-dtype, and a tensor that cannot be q8 is an error naming it and the fix") {
  TempDir dir;
  ConvertOptions o;
  o.dtype = DType::q8;
  o.head_dtype = DType::bf16;
  const ConvertResult r = convert_sqdk(kBundled, dir.file("a.sqdk"), o);
  CHECK(r.head_dtype == DType::bf16);
  const auto f = WeightFile::open(dir.file("a.sqdk"));
  CHECK(f->find("tok_emb")->dtype == DType::bf16);
  CHECK(f->find("blk.3.ffn_down.weight")->dtype == DType::q8);
  CHECK(f->find("out_norm.weight")->dtype == DType::f32);
  // Mixed: a q8 file re-typed back to f32 is the dequantized values.
  ConvertOptions back;
  back.dtype = DType::f32;
  convert_sqdk(dir.file("a.sqdk"), dir.file("b.sqdk"), back);
  const auto g = WeightFile::open(dir.file("b.sqdk"));
  const TensorInfo& t = *g->find("blk.3.ffn_down.weight");
  std::vector<float> x(t.n_elements()), y(t.n_elements());
  g->read_f32(t, x.data());
  f->read_f32(*f->find("blk.3.ffn_down.weight"), y.data());
  CHECK(x == y);

  // d_model 8: no q8 for this model's linears.
  write_fixture(load_fixture("llama"), dir.file("small.sqdk"));
  const std::string e = error_of([&] { convert_sqdk(dir.file("small.sqdk"), dir.file("c.sqdk"), o); });
  INFO(e);
  CHECK(e.find("small.sqdk") != std::string::npos);
  CHECK(e.find("blk.0.attn_q.weight") != std::string::npos);
  CHECK(e.find("not a multiple of 32") != std::string::npos);
  CHECK(e.find("--dtype bf16") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("c.sqdk")));
}

TEST_CASE("convert and inspect CLI: a .sqdk input by its magic, --dtype q8, inspect shows q8") {
  if (!std::filesystem::exists(kCli)) {
    MESSAGE("skipped: " << kCli << " is not built");
    return;
  }
  TempDir dir;
  const std::string out = dir.file("m.q8"), log = dir.file("log.txt");  // the name says nothing: the magic does
  REQUIRE(run_shell(kCli + " convert " + kBundled + " -o " + out + " --dtype q8 --head-dtype f32 --quiet > " + log) == 0);
  CHECK(slurp(log).find("q8 (embeddings and head f32)") != std::string::npos);
  REQUIRE(run_shell(kCli + " inspect --json " + out + " > " + log) == 0);
  const auto j = nlohmann::json::parse(slurp(log));
  CHECK(j["tensors"][0]["dtype"] == "f32");  // tok_emb
  CHECK(j["tensors"][2]["dtype"] == "q8");   // blk.0.attn_q.weight
  CHECK(j["tensors"][2]["bytes"] == 256 * 256 / 32 * 34);
  CHECK(j["bytes_by_dtype"]["q8"]["tensors"] == 28);
  REQUIRE(run_shell(kCli + " inspect " + out + " > " + log) == 0);
  const std::string text = slurp(log);
  CHECK(text.find("blk.0.attn_q.weight") != std::string::npos);
  CHECK(text.find(" q8 ") != std::string::npos);
  CHECK(text.find("dtypes      f32") != std::string::npos);
  // A bad --dtype is refused by the command line.
  CHECK(run_shell(kCli + " convert " + kBundled + " -o " + dir.file("x.sqdk") + " --dtype q4 > /dev/null 2>&1") != 0);
}

TEST_CASE("loader: bf16 and q8 layers pack natively, a layer mixing types is widened to f32") {
  TempDir dir;
  // tests/data/format_q8.json: q8 linears and tok_emb, an untied bf16 lm_head, f32/f16 norms.
  Fixture fx = load_fixture("q8");
  write_fixture(fx, dir.file("q8.sqdk"));
  const auto m = Model::load(dir.file("q8.sqdk"));
  std::map<std::string, size_t> by_type;
  for (const auto& [type, bytes] : m->packed_bytes_by_type()) by_type[type] = bytes;
  CHECK(by_type.size() == 2);
  CHECK(by_type["bf16"] > 0);  // the lm head
  CHECK(by_type["q8"] > 0);    // every block linear
  // attn_k in bf16 beside q8 q and v: the fused qkv layer is widened to f32 (dequantized / widened values).
  for (auto& t : fx.tensors)
    if (t.name == "blk.0.attn_k.weight") {
      t.dtype = DType::bf16;
      encode(t);
    }
  write_fixture(fx, dir.file("mixed.sqdk"));
  const auto mixed = Model::load(dir.file("mixed.sqdk"));
  by_type.clear();
  for (const auto& [type, bytes] : mixed->packed_bytes_by_type()) by_type[type] = bytes;
  CHECK(by_type.size() == 3);
  CHECK(by_type["f32"] > 0);
  // Both run (the loader's result is usable whatever the mix).
  const auto a = c_api_logits(dir.file("q8.sqdk"), {256, 65, 66}), b = c_api_logits(dir.file("mixed.sqdk"), {256, 65, 66});
  CHECK(a.size() == 3);
  CHECK(b.size() == 3);
  for (float v : b.back()) REQUIRE(std::isfinite(v));
}
