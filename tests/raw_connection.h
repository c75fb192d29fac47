// Copyright 2026 The xform Authors.
//
// Bare TCP connections to an xformd on 127.0.0.1, for tests of what it does
// with connections before any call: which it keeps, which it closes.

#ifndef XFORM_TESTS_RAW_CONNECTION_H_
#define XFORM_TESTS_RAW_CONNECTION_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace xform::tests {

// A connection to xformd on 127.0.0.1:`port` from `source`, another loopback
// address (all of 127/8 is local), so that it counts as another client.
inline int ConnectFrom(const char* source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, source, &address.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  return fd;
}

// Whether xformd closed the connection `fd` (EOF or a reset) rather than
// keeping it; what it sent before is left unread.
inline bool ClosedByServer(int fd) {
  char byte;
  const ssize_t got = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Waits up to `timeout` for `fd` to be readable: data or a close on a
// connection, a connection waiting on a listener. Whether it became so.
inline bool WaitReadable(int fd, absl::Duration timeout) {
  pollfd polled{.fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  return poll(&polled, 1,
              static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
}

// Whether a new connection from `source` to xformd's plaintext port is
// closed rather than kept. Both are seen, not waited out: a kept one is
// sent gRPC's SETTINGS at once, a refused one is closed with nothing sent.
inline bool Refused(const char* source, int port) {
  const int fd = ConnectFrom(source, port);
  EXPECT_TRUE(WaitReadable(fd, absl::Seconds(10)))
      << "neither kept (SETTINGS) nor closed";
  const bool refused = ClosedByServer(fd);
  close(fd);
  return refused;
}

}  // namespace xform::tests

#endif  // XFORM_TESTS_RAW_CONNECTION_H_
