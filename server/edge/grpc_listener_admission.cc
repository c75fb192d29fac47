// Copyright 2026 The xform Authors.

#include "server/edge/grpc_listener_admission.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace xform::server {
namespace {

// The C library's accept4(), which ours stands in front of.
int SystemAccept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  return static_cast<int>(syscall(SYS_accept4, fd, address, length, flags));
}

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// What AdmitGrpcListenerConnections installed.
struct Installed {
  std::unique_ptr<ConnectionAdmission> admission;
  std::mutex spare_mu;  // Guards `spare`.
  int spare = -1;       // Closed to make room to refuse one connection.
  LogThrottle out_of_descriptors;  // A line a second, counting the rest.
};
std::atomic<Installed*> installed = nullptr;
std::atomic<bool> interposed = false;

// Accepts the connection waiting on `listen_fd` into the spare descriptor's
// number and closes it at once: the client sees it close, and the backlog
// does not keep a connection gRPC will never be woken for. Whether there was
// one.
bool RefuseIntoSpare(Installed& in, int listen_fd) {
  std::lock_guard<std::mutex> lock(in.spare_mu);
  if (in.spare >= 0) close(in.spare);
  const int refused = SystemAccept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (refused >= 0) close(refused);
  in.spare = OpenSpare();
  return refused >= 0;
}

int AdmittedAccept4(Installed& in, int listen_fd, sockaddr* address,
                    socklen_t* length, int flags) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof(peer);
    const int fd = SystemAccept4(listen_fd, reinterpret_cast<sockaddr*>(&peer),
                                 &peer_length, flags);
    if (fd < 0) {
      const int error = errno;
      if (error != EMFILE && error != ENFILE && error != ENOBUFS &&
          error != ENOMEM) {
        return fd;  // EAGAIN, EINTR, ECONNABORTED: gRPC knows what to do.
      }
      in.out_of_descriptors.Log('W', "accept failed (", strerror(error),
                                "); refusing connections until it passes");
      if ((error == EMFILE || error == ENFILE) &&
          RefuseIntoSpare(in, listen_fd)) {
        continue;
      }
      errno = EAGAIN;  // Not gRPC 1.51's cue to close its listener.
      return -1;
    }
    if (!in.admission->Admit(fd, peer)) {
      close(fd);
      continue;
    }
    if (address != nullptr && length != nullptr) {
      std::memcpy(address, &peer, std::min(*length, peer_length));
      *length = peer_length;
    }
    return fd;
  }
}

}  // namespace

absl::StatusOr<ConnectionAdmission*> AdmitGrpcListenerConnections(
    const AdmissionOptions& options) {
  if (!interposed.load()) {
    return absl::FailedPreconditionError(
        "this program does not stand in front of accept4() "
        "(link server/edge/accept4_interposer.cc)");
  }
  if (installed.load() != nullptr) {
    return absl::FailedPreconditionError("already installed");
  }
  auto in = std::make_unique<Installed>();
  in->spare = OpenSpare();
  if (in->spare < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot open /dev/null: ", strerror(errno)));
  }
  // Connections take the descriptors above those open now.
  absl::StatusOr<std::unique_ptr<ConnectionAdmission>> admission =
      ConnectionAdmission::Create(in->spare, options);
  if (!admission.ok()) {
    close(in->spare);
    return admission.status();
  }
  in->admission = *std::move(admission);
  ConnectionAdmission* made = in->admission.get();
  installed.store(in.release());  // The process's, from now on.
  return made;
}

namespace grpc_listener_internal {

void NoteInterposed() { interposed.store(true); }

int Accept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  Installed* in = installed.load();
  if (in == nullptr) return SystemAccept4(fd, address, length, flags);
  return AdmittedAccept4(*in, fd, address, length, flags);
}

}  // namespace grpc_listener_internal
}  // namespace xform::server
