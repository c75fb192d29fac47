// Copyright 2026 The xform Authors.
//
// The accept4() that grpc_listener_admission.cc puts in front of the C
// library's, on real loopback sockets: what it admits, what it refuses, and
// that running out of descriptors refuses the waiting connection and says
// "try again" (EAGAIN) instead of the error that makes gRPC 1.51 close its
// listener. Its own binary: once installed, it takes every accept4() of the
// process. (That gRPC's TLS listener goes through it is tested against
// xformd itself, in security_process_test.cc.)

#include "server/edge/grpc_listener_admission.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/raw_connection.h"

namespace {

using xform::server::AdmissionOptions;
using xform::server::AdmitGrpcListenerConnections;
using xform::server::ConnectionAdmission;
using xform::tests::ClosedByServer;
using xform::tests::ConnectFrom;
using xform::tests::WaitReadable;

constexpr int kPerAddress = 2;

ConnectionAdmission& Installed() {
  static ConnectionAdmission* admission = [] {
    absl::StatusOr<ConnectionAdmission*> made = AdmitGrpcListenerConnections(
        {.max_connections_per_address = kPerAddress});
    EXPECT_TRUE(made.ok()) << made.status();
    return *made;
  }();
  return *admission;
}

// A non-blocking listening socket on 127.0.0.1, as gRPC makes one; its port.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  EXPECT_EQ(listen(fd, 16), 0);
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *port = ntohs(address.sin_port);
  return fd;
}

// accept4() as gRPC's listener calls it.
int Accept(int listen_fd, sockaddr_storage* peer) {
  socklen_t length = sizeof(*peer);
  return accept4(listen_fd, reinterpret_cast<sockaddr*>(peer), &length,
                 SOCK_NONBLOCK | SOCK_CLOEXEC);
}

TEST(GrpcListenerAdmissionTest, AdmitsAnAddresssShareAndRefusesTheRest) {
  ConnectionAdmission& admission = Installed();
  int port = 0;
  const int listener = Listen(&port);
  std::vector<int> clients;
  for (int k = 0; k < kPerAddress + 1; ++k) {
    clients.push_back(ConnectFrom("127.0.0.2", port));
  }
  // Accepted until each client is admitted or closed: the connections
  // reach the backlog as they are made, so a few empty accepts may come
  // first.
  std::vector<int> admitted;
  int closed = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (admitted.size() + closed < clients.size() && absl::Now() < deadline) {
    sockaddr_storage peer{};
    const int fd = Accept(listener, &peer);
    if (fd < 0) {
      EXPECT_EQ(errno, EAGAIN);
      WaitReadable(listener, absl::Milliseconds(10));
      closed = 0;
      for (int client : clients) closed += ClosedByServer(client);
      continue;
    }
    // The peer's address reaches the caller, as gRPC names peers by it.
    EXPECT_EQ(xform::server::GrpcPeerName(peer).rfind("ipv4:127.0.0.2:", 0),
              0u);
    const auto found = admission.Find(xform::server::GrpcPeerName(peer));
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->fd, fd);
    admitted.push_back(fd);
  }
  EXPECT_EQ(admitted.size(), static_cast<size_t>(kPerAddress));
  EXPECT_EQ(closed, 1);
  for (int fd : clients) close(fd);
  for (int fd : admitted) close(fd);
  close(listener);
}

// At the descriptor limit, the C library's accept4() fails with EMFILE and
// leaves the connection waiting; gRPC 1.51 would then close its listener.
// Ours refuses the connection through its spare descriptor and says EAGAIN,
// and once descriptors are free again the next connection is admitted.
TEST(GrpcListenerAdmissionTest, OutOfDescriptorsRefusesAndSaysTryAgain) {
  Installed();
  int port = 0;
  const int listener = Listen(&port);
  const int waiting = ConnectFrom("127.0.0.3", port);
  ASSERT_TRUE(WaitReadable(listener, absl::Seconds(10)));  // In the backlog.
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  // No descriptor free below the limit: fill up to it, then lower it.
  std::vector<int> filler;
  for (;;) {
    const int fd = dup(listener);
    if (fd < 0) break;
    filler.push_back(fd);
    if (fd >= 200) break;
  }
  rlimit lowered = limit;
  lowered.rlim_cur = filler.back() + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  ASSERT_LT(dup(listener), 0);  // Full indeed.
  ASSERT_EQ(errno, EMFILE);

  sockaddr_storage peer{};
  EXPECT_EQ(Accept(listener, &peer), -1);
  EXPECT_EQ(errno, EAGAIN);

  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  for (int fd : filler) close(fd);
  EXPECT_TRUE(WaitReadable(waiting, absl::Seconds(10)) &&
              ClosedByServer(waiting))
      << "left waiting in the backlog";
  close(waiting);

  const int next = ConnectFrom("127.0.0.3", port);
  ASSERT_TRUE(WaitReadable(listener, absl::Seconds(10)));
  const int fd = Accept(listener, &peer);
  EXPECT_GE(fd, 0) << strerror(errno);
  if (fd >= 0) close(fd);
  close(next);
  close(listener);
}

}  // namespace
