// Copyright 2026 The xform Authors.
//
// The xformd binary as a process: it serves, answers health, and on SIGTERM
// ends its subscriber streams cleanly and exits 0.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "xform/v1/xform.grpc.pb.h"

extern char** environ;

namespace {

// A port the kernel just handed out, so very likely still free.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

TEST(XformdProcessTest, SigtermEndsStreamsCleanlyAndExitsZero) {
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  const std::string listen = absl::StrCat("--listen=", address);
  char* argv[] = {const_cast<char*>(XFORMD_PATH),
                  const_cast<char*>(listen.c_str()),
                  const_cast<char*>("--demo"), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, XFORMD_PATH, nullptr, nullptr, argv, environ), 0);

  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(20)));
  {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, {}, &response).ok());
    EXPECT_EQ(response.status(),
              grpc::health::v1::HealthCheckResponse::SERVING);
  }
  auto stub = xform::v1::Xform::NewStub(channel);
  grpc::ClientContext context;
  xform::v1::SubscribeRequest request;
  request.set_world("demo");
  // The demo world appears just after the server starts serving.
  std::unique_ptr<grpc::ClientReader<xform::v1::FrameUpdate>> reader;
  xform::v1::FrameUpdate update;
  for (int attempt = 0; attempt < 100; ++attempt) {
    grpc::ClientContext info_context;
    xform::v1::GetWorldRequest get;
    get.set_name("demo");
    xform::v1::WorldInfo info;
    if (stub->GetWorld(&info_context, get, &info).ok() && info.entities() > 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  reader = stub->Subscribe(&context, request);
  int deltas = 0;
  while (deltas < 5 && reader->Read(&update)) deltas += !update.snapshot();
  ASSERT_EQ(deltas, 5);

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  while (reader->Read(&update)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(status.error_message(), "server shutting down");

  int wait_status = 0;
  for (int k = 0; k < 200 && waitpid(pid, &wait_status, WNOHANG) == 0; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(WIFEXITED(wait_status)) << "xformd did not exit";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
}

}  // namespace
