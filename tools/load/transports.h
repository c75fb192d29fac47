// Copyright 2026 The xform Authors.
//
// The ways xform-load's subscribers get a world's frames, one class each:
//   stream  xform's own: a Mirror over a Subscribe stream, sent only what
//           moved.
//   poll    the whole world read every frame (Client::Read, in chunks).
//   redis   a relay mirrors the world once and PUBLISHes each frame's moves
//           (the same 56 bytes an entity, with xformd's publication time) to
//           a local redis-server; each subscriber SUBSCRIBEs with hiredis
//           and puts each matrix in a table by id, as a Mirror does.
// Every mode's latency runs from xformd's publication to the subscriber
// holding the update (poll: from the write's acknowledgement).
// Each receives on threads of its own into its Recorder, and stalls when the
// Recorder says so. Each connects with the options it is given (LoadRun's
// give every client a connection of its own).

#ifndef XFORM_TOOLS_LOAD_TRANSPORTS_H_
#define XFORM_TOOLS_LOAD_TRANSPORTS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/load/measure.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/region.h"

namespace xform::load {

class Subscriber {
 public:
  explicit Subscriber(bool stalls) : recorder_(stalls) {}
  virtual ~Subscriber() = default;
  // True once it holds the world and is receiving.
  virtual bool Ready() = 0;
  Recorder& recorder() { return recorder_; }

 protected:
  Recorder recorder_;
};

// A stream subscriber's view as a camera moving through the world: its
// region starts at `region` moved by up to `range` along x and z (where,
// the subscriber's index decides), and moves `hz` times a second
// (Mirror::SetRegion) at `speed` along a heading of its own in the x-z
// plane, turning back at `range` from the region's own position.
struct Camera {
  Region region;
  float range = 400;
  float speed = 10;
  double hz = 60;
};

// `max_rate_hz`: the Mirror's (0: a message per frame). Of a cluster's
// several addresses, subscriber `index` starts at the (index mod n)th, so
// that subscribers spread over the nodes. With a `camera`, the subscriber's
// view is its region, moving.
std::unique_ptr<Subscriber> StartStreamSubscriber(
    const ClientOptions& options, const std::string& world,
    MirrorOptions::Encoding encoding, float precision, double max_rate_hz,
    bool stalls, int index = 0,
    const std::optional<Camera>& camera = std::nullopt);
// Reads `ids` (which must outlive it) every 1 / hz s; `acks` tells it how old
// the writes it sees are.
std::unique_ptr<Subscriber> StartPollSubscriber(
    const ClientOptions& options, const std::string& world,
    const std::vector<EntityId>& ids, double hz, AckLog& acks, bool stalls);
// Subscribes to the relay's channel; its table of matrices by id is sized
// for `entities` at the start, as a Mirror's copy is by its snapshot, so
// that it does not grow (and rehash) while measured.
std::unique_ptr<Subscriber> StartRedisSubscriber(int redis_port,
                                                 size_t entities, bool stalls);

// Mirrors the world and publishes each frame's moves to redis-server.
class RedisRelay {
 public:
  virtual ~RedisRelay() = default;
  virtual bool ok() const = 0;     // redis-server is reachable.
  virtual bool Ready() const = 0;  // And the world is mirrored.
};
std::unique_ptr<RedisRelay> StartRedisRelay(const ClientOptions& options,
                                            const std::string& world,
                                            int redis_port);

}  // namespace xform::load

#endif  // XFORM_TOOLS_LOAD_TRANSPORTS_H_
