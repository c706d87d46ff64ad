// libFuzzer target: sqrtdk-serve's request handling up to the engine. An input that starts with an upper-case
// letter is raw HTTP bytes, framed as the server frames them (tools/serve/http_framing.h: Beast's parser with the
// server's limits; several requests in one input are pipelined); each complete request's body then goes to the
// body parser. Any other input is a body given to the body parser directly, as /v1/completions and as
// /v1/chat/completions.
// Contract under test: framing either completes a request, waits for more bytes, refuses a transfer coding (501),
// or fails with a status of 400, 413 or 431; parse_request returns a request or throws RequestError with a 4xx status; never a crash, an
// ASan/UBSan report or another exception type.
#include <sqrtdk/format.h>

#include "tools/serve/http_framing.h"
#include "tools/serve/request.h"

#include <boost/asio/buffer.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

constexpr size_t kMaxBody = 4096;

void parse_body(std::string_view body) {
  sqrtdk::ModelConfig config;
  config.arch = sqrtdk::Arch::llama;
  config.n_vocab = 258;
  config.max_seq = 64;
  config.tokenizer = sqrtdk::TokenizerKind::byte_level;
  config.bos_id = 256;
  config.eos_id = 257;
  sqrtdk::serve::RequestLimits limits;
  limits.max_context = 64;
  const sqrtdk::serve::ServedModel model{config, nullptr, "toy"};
  for (auto endpoint : {sqrtdk::serve::Endpoint::completions, sqrtdk::serve::Endpoint::chat_completions}) {
    try {
      sqrtdk::serve::parse_request(endpoint, body, model, limits);
    } catch (const sqrtdk::serve::RequestError& e) {
      if (e.status() < 400 || e.status() >= 500) std::abort();
    } catch (...) {
      std::abort();
    }
  }
}

void frame_requests(std::string_view bytes) {
  while (!bytes.empty()) {
    sqrtdk::serve::RequestParser parser;
    sqrtdk::serve::set_limits(parser, kMaxBody);
    parser.eager(true);
    boost::beast::error_code ec;
    while (!ec && !parser.is_done() && !bytes.empty()) {
      const size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
      if (used > bytes.size()) std::abort();
      bytes.remove_prefix(used);
      if (ec == boost::beast::http::error::need_more) return;  // the server would wait for more bytes
    }
    // Once the head is read the server answers a transfer coding it cannot frame (501, and closes) and checks the
    // content coding (415): their list splitting sees the same hostile bytes.
    if (parser.is_header_done()) {
      sqrtdk::serve::unsupported_content_coding(parser.get());
      if (!sqrtdk::serve::unsupported_transfer_coding(parser.get()).empty()) return;
    }
    if (ec) {
      const int status = sqrtdk::serve::framing_error_status(ec);
      if (status != 400 && status != 413 && status != 431) std::abort();
      return;  // the server answers and closes
    }
    if (!parser.is_done()) return;
    if (parser.get().body().size() > kMaxBody) std::abort();
    parse_body(parser.get().body());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] >= 'A' && input[0] <= 'Z')
    frame_requests(input);
  else
    parse_body(input);
  return 0;
}
