// What a handler of the HTTP server (common/http_server.h) reads and
// writes: the request, the response (a body, or a streamed one through a
// DataSink), the handler types, and the reason phrase of a status. Shared by
// the server and its connections (common/http_connection.h).
#ifndef KVCANARY_COMMON_HTTP_MESSAGE_H_
#define KVCANARY_COMMON_HTTP_MESSAGE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvcanary::http {

namespace internal {
class Connection;
}  // namespace internal

// Header fields in the order they were set; names compare without case.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target up to '?', as sent
  std::string target;  // the whole request target
  std::string body;
  Headers headers;
  std::string remote_addr;  // the peer's IP address
  int version = 11;         // 10: HTTP/1.0, 11: HTTP/1.1
  // Whether the client has hung up (closed its side with nothing left to
  // read), as cpp-httplib's member of the same name: for a handler that
  // waits on other work before it answers. Cheap (one poll()); callable
  // from any thread while the handler runs. Unset outside the server.
  std::function<bool()> is_connection_closed;

  // The first field named `name` (any case), "" if none.
  std::string get_header_value(absl::string_view name) const;
  bool has_header(absl::string_view name) const;
  // How many fields are named `name` (any case).
  size_t get_header_value_count(absl::string_view name) const;
};

// Where a streamed (chunked) response body goes. Handed to a content
// provider on the handler thread; not thread-safe.
class DataSink {
 public:
  virtual ~DataSink() = default;
  // Sends `size` bytes as one chunk, flushed at once. False once the client
  // is gone, the write deadline passed or the server is stopping (and from
  // then on).
  virtual bool write(const char* data, size_t size) = 0;
  // Ends the body (the last chunk); the provider is not called again.
  virtual void done() = 0;
  // Whether the client is still there to write to.
  virtual bool is_writable() const = 0;
};

// Called with the bytes written so far, again and again, until it returns
// false (the response is cut off and the connection closed) or calls
// sink.done().
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
// Called once the response is finished with: true if the streamed body was
// sent in full.
using ContentProviderResourceReleaser = std::function<void(bool success)>;

// Not thread-safe; owned by the handler thread.
class Response {
 public:
  Response() = default;
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;
  ~Response();  // runs the releaser, if any

  int status = 200;
  std::string body;
  Headers headers;

  // Replaces any field of that name.
  void set_header(absl::string_view name, absl::string_view value);
  bool has_header(absl::string_view name) const;
  std::string get_header_value(absl::string_view name) const;
  void set_content(std::string body, absl::string_view content_type);
  // The body comes from `provider`, sent with Transfer-Encoding: chunked.
  void set_chunked_content_provider(
      absl::string_view content_type, ContentProvider provider,
      ContentProviderResourceReleaser releaser = nullptr);

 private:
  friend class internal::Connection;
  ContentProvider provider_;
  ContentProviderResourceReleaser releaser_;
  bool provider_success_ = false;
};

using Handler = std::function<void(const Request&, Response&)>;
// Decides, from a request's line and headers alone (its body is not read
// yet), whether the client that sent "Expect: 100-continue" may send the
// body: true to answer "100 Continue" and read it; false to answer `res`
// instead (its status set; the error handler fills an empty body) and
// close the connection without reading the body. Runs on an I/O thread:
// must not block.
using ExpectContinueHandler = std::function<bool(const Request&, Response&)>;

// The reason phrase of an HTTP status ("Not Found"); "" if unknown.
absl::string_view StatusReason(int status);

}  // namespace kvcanary::http

#endif  // KVCANARY_COMMON_HTTP_MESSAGE_H_
