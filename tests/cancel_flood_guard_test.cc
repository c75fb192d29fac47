// Copyright 2026 The xform Authors.
//
// CancelFloodGuard's count, with a stepped clock and real sockets for the
// connections it cuts off: cancels under the rate never cut a connection
// off, a burst past it does, once; a new connection on the same descriptor
// number starts afresh. (What it counts, calls their client cancelled, and
// that honest calls are not counted: XformdProcessTest.)

#include "server/edge/cancel_flood_guard.h"

#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/edge/connection_admission.h"

namespace xform::server {
namespace {

class CancelFloodGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // No penalty: the connections here all come from one (Unix) address.
    auto admission = ConnectionAdmission::Create(
        0, {.cut_off_penalty = absl::ZeroDuration()});
    ASSERT_TRUE(admission.ok()) << admission.status();
    admission_ = *std::move(admission);
    guard_ = std::make_unique<CancelFloodGuard>(100, admission_.get());
  }

  // A connection admitted on a socket of its own; the far end in `*peer`.
  ConnectionAdmission::Connection Admit(int* peer) {
    int pair[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    *peer = pair[1];
    sockaddr_storage address{};
    address.ss_family = AF_UNIX;
    EXPECT_TRUE(admission_->Admit(pair[0], address));
    fds_.push_back(pair[0]);
    fds_.push_back(pair[1]);
    return admission_->Find(absl::StrCat("fd:", pair[0])).value();
  }

  // Whether the connection whose far end is `peer` was shut down.
  static bool CutOff(int peer) {
    char byte;
    return recv(peer, &byte, 1, MSG_DONTWAIT) == 0;
  }

  void TearDown() override {
    for (int fd : fds_) close(fd);
  }

  std::unique_ptr<ConnectionAdmission> admission_;
  std::unique_ptr<CancelFloodGuard> guard_;
  std::vector<int> fds_;
  const absl::Time start_ = absl::UnixEpoch() + absl::Hours(1);
};

TEST_F(CancelFloodGuardTest, CancelsUnderTheRateAreNeverCutOff) {
  int peer;
  const ConnectionAdmission::Connection connection = Admit(&peer);
  // 99 a second for a minute, evenly.
  for (int k = 0; k < 99 * 60; ++k) {
    EXPECT_FALSE(
        guard_->CountCancelled(connection, start_ + absl::Seconds(k) / 99))
        << k;
  }
  EXPECT_FALSE(CutOff(peer));
}

TEST_F(CancelFloodGuardTest, ABurstPastTheRateIsCutOffOnce) {
  int peer;
  const ConnectionAdmission::Connection connection = Admit(&peer);
  int cut = 0;
  for (int k = 0; k < 100; ++k)
    cut += guard_->CountCancelled(connection, start_);
  EXPECT_EQ(cut, 0);  // A second's worth, at once.
  EXPECT_TRUE(guard_->CountCancelled(connection, start_));
  EXPECT_TRUE(CutOff(peer));
  // Another connection is not held to it.
  int other_peer;
  const ConnectionAdmission::Connection other = Admit(&other_peer);
  EXPECT_FALSE(guard_->CountCancelled(other, start_));
  EXPECT_FALSE(CutOff(other_peer));
}

TEST_F(CancelFloodGuardTest, ANewConnectionOnAReusedNumberStartsAfresh) {
  int peer;
  ConnectionAdmission::Connection connection = Admit(&peer);
  for (int k = 0; k < 90; ++k) guard_->CountCancelled(connection, start_);
  // The number is admitted again: another connection, a new serial.
  ConnectionAdmission::Connection again = connection;
  ++again.serial;
  for (int k = 0; k < 90; ++k) {
    EXPECT_FALSE(guard_->CountCancelled(again, start_)) << k;
  }
}

}  // namespace
}  // namespace xform::server
