// Copyright 2026 The xform Authors.
//
// ConnectionsPerAddress on real descriptors: a client address at its limit is
// refused until one of its connections is found closed, by its descriptor
// being accepted again or by the check of an address at its limit; other
// addresses are never held back by it.

#include "server/edge/connections_per_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace xform::server {
namespace {

using Client = ConnectionsPerAddress::Client;

Client Ipv4(const char* address) {
  sockaddr_storage storage{};
  auto& in = reinterpret_cast<sockaddr_in&>(storage);
  in.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, address, &in.sin_addr), 1) << address;
  return Client::Of(storage);
}

Client Ipv6(const char* address) {
  sockaddr_storage storage{};
  auto& in6 = reinterpret_cast<sockaddr_in6&>(storage);
  in6.sin6_family = AF_INET6;
  EXPECT_EQ(inet_pton(AF_INET6, address, &in6.sin6_addr), 1) << address;
  return Client::Of(storage);
}

// A descriptor for a socket of its own, as accept() would give.
int Socket() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  return fd;
}

class ConnectionsPerAddressTest : public testing::Test {
 protected:
  ~ConnectionsPerAddressTest() override {
    for (int fd : open_) close(fd);
  }
  int Open() { return open_.emplace_back(Socket()); }
  void Close(int fd) {
    close(fd);
    std::erase(open_, fd);
  }

  const absl::Time start_ = absl::UnixEpoch() + absl::Hours(1);
  std::vector<int> open_;
};

TEST(ConnectionsPerAddressClientTest, IPv4IsOneAddressAndIPv6ItsSlash64) {
  EXPECT_EQ(Ipv4("10.0.0.5"), Ipv4("10.0.0.5"));
  EXPECT_NE(Ipv4("10.0.0.5"), Ipv4("10.0.0.6"));
  EXPECT_EQ(Ipv6("::ffff:10.0.0.5"), Ipv4("10.0.0.5"));
  EXPECT_EQ(Ipv6("2001:db8:1:2::1"), Ipv6("2001:db8:1:2:ffff::7"));
  EXPECT_NE(Ipv6("2001:db8:1:2::1"), Ipv6("2001:db8:1:3::1"));
  EXPECT_NE(Ipv6("::1"), Ipv4("127.0.0.1"));
}

TEST_F(ConnectionsPerAddressTest, AnAddressAtItsLimitIsRefusedAndNoOtherIs) {
  ConnectionsPerAddress limit(3);
  const Client host = Ipv4("10.0.0.5");
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(limit.Admit(Open(), host, start_));
  EXPECT_FALSE(limit.Admit(Open(), host, start_));
  // Still open when checked later: still refused.
  EXPECT_FALSE(limit.Admit(Open(), host, start_ + absl::Seconds(1)));
  EXPECT_EQ(limit.Counted(host), 3);
  EXPECT_TRUE(limit.Admit(Open(), Ipv4("10.0.0.6"), start_));
  EXPECT_TRUE(limit.Admit(Open(), Ipv6("2001:db8::1"), start_));
}

TEST_F(ConnectionsPerAddressTest, AClosedConnectionIsFoundAtTheNextCheck) {
  ConnectionsPerAddress limit(2, absl::Milliseconds(100));
  const Client host = Ipv4("10.0.0.5");
  const int first = Open();
  ASSERT_TRUE(limit.Admit(first, host, start_));
  ASSERT_TRUE(limit.Admit(Open(), host, start_));
  // Checked, and found full, at start_ + 1 s.
  EXPECT_FALSE(limit.Admit(Open(), host, start_ + absl::Seconds(1)));
  // Opened first, so that neither takes the closed one's number.
  const int second = Open();
  const int third = Open();
  Close(first);
  // Within the pause between checks the count stands, whatever is closed.
  EXPECT_FALSE(limit.Admit(second, host,
                           start_ + absl::Seconds(1) + absl::Milliseconds(50)));
  EXPECT_TRUE(limit.Admit(third, host,
                          start_ + absl::Seconds(1) + absl::Milliseconds(100)));
  EXPECT_EQ(limit.Counted(host), 2);
}

TEST_F(ConnectionsPerAddressTest, ADescriptorAcceptedAgainWasClosedBefore) {
  ConnectionsPerAddress limit(1, absl::Hours(1));
  const Client host = Ipv4("10.0.0.5");
  const int fd = Open();
  ASSERT_TRUE(limit.Admit(fd, host, start_));
  EXPECT_FALSE(limit.Admit(Open(), host, start_));
  Close(fd);
  // The kernel hands out the lowest free number: this one again.
  const int again = Open();
  ASSERT_EQ(again, fd);
  EXPECT_TRUE(limit.Admit(again, host, start_));
}

// A number gRPC closed and something else reused (a file, a pipe) is not
// taken for the connection that had it.
TEST_F(ConnectionsPerAddressTest, ADescriptorNamingAnotherFileIsNotCounted) {
  ConnectionsPerAddress limit(1);
  const Client host = Ipv4("10.0.0.5");
  const int fd = Open();
  ASSERT_TRUE(limit.Admit(fd, host, start_));
  EXPECT_FALSE(limit.Admit(Open(), host, start_));
  int pipe_ends[2];
  ASSERT_EQ(pipe(pipe_ends), 0);
  ASSERT_EQ(dup2(pipe_ends[0], fd), fd);  // Closes the socket under fd.
  close(pipe_ends[0]);
  close(pipe_ends[1]);
  EXPECT_TRUE(limit.Admit(Open(), host, start_ + absl::Seconds(1)));
}

}  // namespace
}  // namespace xform::server
