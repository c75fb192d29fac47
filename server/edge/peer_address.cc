// Copyright 2026 The xform Authors.

#include "server/edge/peer_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace xform::server {

std::string GrpcPeerName(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    if (inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host)) != nullptr) {
      return absl::StrCat("ipv4:", host, ":", ntohs(in.sin_port));
    }
  } else if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
      // gRPC names these by their IPv4 address, as a dual-stack listener
      // accepts IPv4 clients.
      if (inet_ntop(AF_INET, &in6.sin6_addr.s6_addr[12], host, sizeof(host)) !=
          nullptr) {
        return absl::StrCat("ipv4:", host, ":", ntohs(in6.sin6_port));
      }
    } else if (inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host)) !=
               nullptr) {
      return absl::StrCat("ipv6:[", host, "]:", ntohs(in6.sin6_port));
    }
  }
  return "";
}

std::string CallerKey(absl::string_view principal,
                      absl::string_view grpc_peer) {
  if (!principal.empty()) return absl::StrCat("principal ", principal);
  const ConnectionsPerAddress::Client client = ClientOfPeer(grpc_peer);
  return absl::StrCat("address ", absl::Hex(client.high), ":",
                      absl::Hex(client.low));
}

ConnectionsPerAddress::Client ClientOfPeer(absl::string_view grpc_peer) {
  sockaddr_storage address{};
  int fd = -1;
  if (absl::ConsumePrefix(&grpc_peer, "fd:")) {
    socklen_t length = sizeof(address);
    if (!absl::SimpleAtoi(grpc_peer, &fd) || fd < 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return {};
    }
    return ConnectionsPerAddress::Client::Of(address);
  }
  // The host part: up to the port's colon, inside brackets for IPv6.
  const bool v6 = absl::ConsumePrefix(&grpc_peer, "ipv6:[");
  if (!v6 && !absl::ConsumePrefix(&grpc_peer, "ipv4:")) return {};
  const size_t end = v6 ? grpc_peer.find_first_of("]%") : grpc_peer.rfind(':');
  const std::string host(grpc_peer.substr(0, end));
  if (v6) {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(address);
    in6.sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, host.c_str(), &in6.sin6_addr) != 1) return {};
  } else {
    auto& in = reinterpret_cast<sockaddr_in&>(address);
    in.sin_family = AF_INET;
    if (inet_pton(AF_INET, host.c_str(), &in.sin_addr) != 1) return {};
  }
  return ConnectionsPerAddress::Client::Of(address);
}

std::string PeerAddress(absl::string_view grpc_peer) {
  int fd = -1;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") ||
      !absl::SimpleAtoi(grpc_peer, &fd) || fd < 0) {
    return std::string(grpc_peer);
  }
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    if (std::string name = GrpcPeerName(address); !name.empty()) return name;
  }
  return absl::StrCat("fd:", fd);
}

}  // namespace xform::server
