// How sqrtdk-serve frames one HTTP/1.x request: Boost.Beast's parser with the server's head and body limits, and
// the status each framing error is answered with. Shared by the server and the fuzz target that feeds it hostile
// bytes (header-only, so the fuzz preset needs only Boost's headers).
#pragma once

#include <utility>  // before Asio/Beast: 1.74's headers use std::exchange without including it

#include <boost/beast/http.hpp>

#include <cstddef>

namespace sqrtdk::serve {

inline constexpr size_t kHeaderLimit = 16 << 10;  // request line and headers, bytes (431 past it)

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Beast counts chunked body bytes against the limit as they arrive (413 before the body ends) and refuses
// conflicting Content-Length headers, or Content-Length with chunked (400: request smuggling).
inline void set_limits(RequestParser& parser, size_t max_body) {
  parser.header_limit(kHeaderLimit);
  parser.body_limit(max_body);
}

// The status a framing error is answered with before the connection closes (what follows cannot be framed), or 0
// when there is no one to answer: the client left, stalled past its deadline, or closed between requests.
inline int framing_error_status(const boost::beast::error_code& ec) {
  namespace http = boost::beast::http;
  if (ec.category() != http::make_error_code(http::error::bad_target).category() || ec == http::error::end_of_stream ||
      ec == http::error::partial_message || ec == http::error::need_more)
    return 0;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::header_limit) return 431;
  return 400;
}

}  // namespace sqrtdk::serve
