// The transport of one HTTP server connection (common/http_connection.h):
// the accepted socket itself, or a mutual-TLS session over it
// (common/tls.h), behind Beast's stream interface. Internal to the server.
#ifndef KVCANARY_COMMON_HTTP_STREAM_H_
#define KVCANARY_COMMON_HTTP_STREAM_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/buffer.hpp"
#include "boost/asio/compose.hpp"
#include "boost/asio/error.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "common/tls.h"

namespace kvcanary::http::internal {

using Tcp = boost::asio::ip::tcp;
// The connection's strand: the socket is accepted onto one.
using Strand = boost::asio::any_io_executor;

// What a connection reads and writes through, as Beast's AsyncReadStream and
// AsyncWriteStream: the socket itself, or a TLS session over it (each call
// tries the session, and waits on the socket for the direction the session
// asks for). Used on the strand only.
class Stream {
 public:
  using executor_type = Strand;

  explicit Stream(Tcp::socket& socket) : socket_(socket) {}

  executor_type get_executor() { return socket_.get_executor(); }
  // Null: plain TCP.
  tls::Session* session() const { return session_.get(); }
  void set_session(std::unique_ptr<tls::Session> session) {
    session_ = std::move(session);
  }

  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    if (session_ == nullptr) {
      return socket_.async_read_some(buffers, std::forward<Token>(token));
    }
    return boost::asio::async_compose<Token,
                                      void(boost::system::error_code, size_t)>(
        TlsOp<boost::asio::mutable_buffer, /*kWrite=*/false>{
            socket_, *session_, First<boost::asio::mutable_buffer>(buffers)},
        token, socket_);
  }

  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    if (session_ == nullptr) {
      return socket_.async_write_some(buffers, std::forward<Token>(token));
    }
    return boost::asio::async_compose<Token,
                                      void(boost::system::error_code, size_t)>(
        TlsOp<boost::asio::const_buffer, /*kWrite=*/true>{
            socket_, *session_, First<boost::asio::const_buffer>(buffers)},
        token, socket_);
  }

 private:
  // The first non-empty buffer of a sequence (an empty one if none): a
  // read_some or write_some may move fewer bytes than offered.
  template <typename Buffer, typename Buffers>
  static Buffer First(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return Buffer();
  }

  // One read_some or write_some through the session.
  template <typename Buffer, bool kWrite>
  struct TlsOp {
    Tcp::socket& socket;
    tls::Session& session;
    Buffer buffer;

    template <typename Self>
    void operator()(Self& self, boost::system::error_code ec = {}) {
      if (ec) return self.complete(ec, 0);
      if (buffer.size() == 0) return self.complete(ec, 0);
      size_t n = 0;
      tls::Io io;
      if constexpr (kWrite) {
        io = session.Write(static_cast<const char*>(buffer.data()),
                           buffer.size(), &n);
      } else {
        io = session.Read(static_cast<char*>(buffer.data()), buffer.size(), &n);
      }
      switch (io) {
        case tls::Io::kOk:
          return self.complete(ec, n);
        case tls::Io::kWantRead:
          return socket.async_wait(Tcp::socket::wait_read, std::move(self));
        case tls::Io::kWantWrite:
          return socket.async_wait(Tcp::socket::wait_write, std::move(self));
        case tls::Io::kClosed:
          return self.complete(boost::asio::error::eof, 0);
        case tls::Io::kFailed:
          return self.complete(boost::asio::error::connection_reset, 0);
      }
    }
  };

  Tcp::socket& socket_;
  std::unique_ptr<tls::Session> session_;
};

}  // namespace kvcanary::http::internal

#endif  // KVCANARY_COMMON_HTTP_STREAM_H_
