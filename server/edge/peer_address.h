// Copyright 2026 The xform Authors.
//
// Who is at the other end of a call, from gRPC's name for its peer
// (ServerContext::peer()): its address as gRPC writes one, and the client
// (an address, an IPv6 /64) the edge counts connections by. gRPC names a
// connection the Acceptor handed over by its descriptor ("fd:12"), and one
// it accepted itself by the address ("ipv4:10.0.0.5:41234"); these read
// either.

#ifndef XFORM_SERVER_EDGE_PEER_ADDRESS_H_
#define XFORM_SERVER_EDGE_PEER_ADDRESS_H_

#include <sys/socket.h>

#include <string>

#include "absl/strings/string_view.h"
#include "server/edge/connections_per_address.h"

namespace xform::server {

// How gRPC names a peer at `address`: "ipv4:10.0.0.5:41234",
// "ipv6:[::1]:41234" (an IPv4-mapped IPv6 address as the IPv4 one); "" for
// other families.
std::string GrpcPeerName(const sockaddr_storage& address);

// Which client (an IPv4 address, an IPv6 /64) the call's peer is, from
// gRPC's name for it (ServerContext::peer()): "ipv4:...", "ipv6:[...]", or
// "fd:12" for a connection an Acceptor handed over (one getpeername()).
// Anything else is the one client Client::Of gives other families.
ConnectionsPerAddress::Client ClientOfPeer(absl::string_view grpc_peer);

// Who a caller is, for what is counted per caller (refusals, work): the
// principal it authenticated as with a credential, or else (`principal`
// empty) its client address from gRPC's name for the peer. Without an
// auth file everyone is "anonymous", and one client's count must not be
// another's.
std::string CallerKey(absl::string_view principal, absl::string_view grpc_peer);

// What to call a call's peer in logs and listings: gRPC's name for it
// (ServerContext::peer()), but for a connection an Acceptor handed over,
// which gRPC names by its descriptor ("fd:12"), the address at the other end
// as gRPC writes one. One getpeername() for those. Should the connection
// have closed meanwhile, its descriptor may be another's or none: then
// "fd:12" stays, or, rarely, a dying call is named by the connection that
// reused it.
std::string PeerAddress(absl::string_view grpc_peer);

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_PEER_ADDRESS_H_
