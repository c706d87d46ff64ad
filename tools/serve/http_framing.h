// How sqrtdk-serve frames one HTTP/1.x request: Boost.Beast's parser with the server's head and body limits, and
// the status each framing error is answered with. Shared by the server and the fuzz target that feeds it hostile
// bytes (header-only, so the fuzz preset needs only Boost's headers).
#pragma once

#include <utility>  // before Asio/Beast: 1.74's headers use std::exchange without including it

#include <boost/beast/http.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

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
// when there is no one to answer: the client left, or closed between requests. A request cut short by the client's
// close (partial_message) is answered 400: a client that only half-closed still reads.
inline int framing_error_status(const boost::beast::error_code& ec) {
  namespace http = boost::beast::http;
  if (ec.category() != http::make_error_code(http::error::bad_target).category() || ec == http::error::end_of_stream ||
      ec == http::error::need_more)
    return 0;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::header_limit) return 431;
  return 400;
}

// The first element of the comma-separated lists in every `name` field that `accepted` refuses, as written (without
// parameters after ';'), or "" if all are accepted. Empty elements do not count (RFC 9110 §5.6.1).
template <class Accepted>
std::string first_refused_coding(const boost::beast::http::fields& fields, boost::beast::http::field name,
                                 Accepted accepted) {
  const auto [first, last] = fields.equal_range(name);
  for (auto field = first; field != last; ++field) {
    std::string_view list(field->value().data(), field->value().size());
    while (!list.empty()) {
      const size_t comma = list.find(',');
      std::string_view coding = list.substr(0, std::min(comma, list.find(';')));
      list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
      while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) coding.remove_prefix(1);
      while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) coding.remove_suffix(1);
      if (!coding.empty() && !accepted(boost::beast::string_view(coding.data(), coding.size())))
        return std::string(coding);
    }
  }
  return "";
}

// A transfer coding other than chunked (gzip, deflate, ...), or "". Beast frames chunked only, and took
// "Transfer-Encoding: gzip" for a request without a body (or, beside a Content-Length, framed it by that: a
// smuggling risk). The server answers 501 Not Implemented and closes (RFC 9112 §6.1), before reading a body.
inline std::string unsupported_transfer_coding(const boost::beast::http::fields& head) {
  return first_refused_coding(head, boost::beast::http::field::transfer_encoding, [](boost::beast::string_view coding) {
    return boost::beast::iequals(coding, "chunked");
  });
}

// A content coding other than identity (gzip, br, ...), or "": bodies are parsed as they come, never decompressed,
// so the server answers 415 (RFC 9110 §15.5.16) rather than read compressed bytes as JSON.
inline std::string unsupported_content_coding(const boost::beast::http::fields& head) {
  return first_refused_coding(head, boost::beast::http::field::content_encoding, [](boost::beast::string_view coding) {
    return boost::beast::iequals(coding, "identity");
  });
}

}  // namespace sqrtdk::serve
