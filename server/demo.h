// Copyright 2026 The xform Authors.
//
// xformd --demo: worlds that drive themselves, for trying the server out
// and for looking at (xform-web). Each is written as core commands sent
// through the wire conversions, as a client's would be.
//   demo   10,000 entities in 100 random trees; 10 trees turn a tick, so a
//          frame moves about 1,000 entities. 30 Hz.
//   solar  a sun, 8 planets on orbit pivots with 15 moons on pivots of
//          their own, and a belt of 3,000 asteroids under one pivot: every
//          motion is a parent's, which its children follow. 60 Hz.
//   city   --demo_city_entities (100,000) over 1 km x 1 km: 400 blocks with
//          9 buildings each (children), and drones for the rest, a fiftieth
//          of them (at most 10,000) flying the streets, the others still:
//          for region views (xform-web's "follow camera"). 30 Hz.

#ifndef XFORM_SERVER_DEMO_H_
#define XFORM_SERVER_DEMO_H_

#include <cstdint>
#include <thread>

#include "absl/synchronization/notification.h"
#include "server/host/world_host.h"

namespace xform::server {

// Creates the demo worlds (replacing ones recovered from --data_dir) and
// moves them until `stop`; the city when `city_entities` > 0. Blocks;
// errors are logged.
void RunDemoWorlds(WorldHost& host, uint64_t city_entities,
                   const absl::Notification& stop);

// RunDemoWorlds on a thread of its own, when `enabled`, until Stop() (or
// the destructor).
class DemoWorlds {
 public:
  DemoWorlds(WorldHost& host, bool enabled, uint64_t city_entities);
  ~DemoWorlds() { Stop(); }
  DemoWorlds(const DemoWorlds&) = delete;
  DemoWorlds& operator=(const DemoWorlds&) = delete;
  void Stop();

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_DEMO_H_
