// Copyright 2026 The xform Authors.
//
// Writers that keep a model of exactly what the server acknowledged, for
// tests that kill a server (or a node of a cluster) and check that what
// it acknowledged survived: Write applies random valid batches until the
// server stops answering; Settle compares the server's world with the
// model afterwards.

#ifndef XFORM_TESTS_ACKNOWLEDGED_WRITES_H_
#define XFORM_TESTS_ACKNOWLEDGED_WRITES_H_

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/random_batches.h"
#include "tests/wait_until.h"
#include "xform/client.h"
#include "xform/world.h"

namespace xform::testing {

// One writer, its world, and what the server acknowledged of it.
struct Writer {
  std::string world;
  WorldOptions options;
  bool streamed = false;  // Through ApplyStream rather than Apply.
  RandomBatches random;
  World model;                                  // The acknowledged batches.
  std::optional<std::vector<Command>> pending;  // In flight at the crash.
  uint64_t acknowledged = 0;                    // Batches, over all cycles.
  uint64_t last_frame = 0;                      // The last one acknowledged.
  bool in_flight_landed = false;
};

// A client made with `options` once a call through it is answered (calls
// are UNAVAILABLE until recovery is over), or null after `timeout`.
inline std::unique_ptr<Client> ConnectWhenAnswering(
    const ClientOptions& options, absl::Duration timeout) {
  std::unique_ptr<Client> ready;
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<std::unique_ptr<Client>> client =
            Client::Connect(options);
        if (!client.ok() || !(*client)->ListWorlds().ok()) return false;
        ready = *std::move(client);
        return true;
      },
      timeout, "xformd to answer"));
  return ready;
}

inline std::unique_ptr<Client> ConnectReady(const std::string& address) {
  ClientOptions options;
  options.address = address;
  options.own_connection = true;
  options.deadline = absl::Seconds(10);
  return ConnectWhenAnswering(options, absl::Seconds(30));
}

// Whether the server's world holds exactly `model`: the same entities, each
// with the same parent, local and world matrix, bit for bit.
inline std::string Differs(Client& client, const std::string& world,
                           const World& model) {
  absl::StatusOr<WorldInfo> info = client.GetWorld(world);
  if (!info.ok()) return info.status().ToString();
  if (info->entities != model.size()) {
    return absl::StrCat(info->entities, " entities, the model ", model.size());
  }
  std::vector<EntityId> ids;
  model.ForEach(
      [&](EntityId e, EntityId, const Matrix3x4&) { ids.push_back(e); });
  if (ids.empty()) return "";
  absl::StatusOr<std::vector<EntityState>> read = client.Read(world, ids);
  if (!read.ok()) return read.status().ToString();
  for (const EntityState& got : *read) {
    const Transform local = *model.Local(got.entity);
    const Matrix3x4 matrix = *model.WorldMatrix(got.entity);
    if (got.parent != *model.Parent(got.entity) ||
        std::memcmp(&got.local, &local, sizeof local) != 0 ||
        std::memcmp(&got.world, &matrix, sizeof matrix) != 0) {
      return absl::StrCat("entity ", got.entity, " differs");
    }
  }
  return "";
}

// Applies random batches until the server stops answering.
inline void Write(Client& client, Writer& writer) {
  std::unique_ptr<BatchWriter> stream;
  if (writer.streamed) {
    absl::StatusOr<std::unique_ptr<BatchWriter>> opened =
        client.OpenWriter(writer.world);
    if (!opened.ok()) return;
    stream = *std::move(opened);
  }
  for (;;) {
    World next = writer.model;
    std::vector<Command> batch = writer.random.Next(next, 12);
    writer.pending = batch;
    const ApplyOptions options{.end_frame =
                                   writer.options.mode == FrameMode::kDriven};
    absl::StatusOr<uint64_t> frame =
        stream != nullptr ? stream->Write(batch, options)
                          : client.Apply(writer.world, batch, options);
    if (!frame.ok()) return;  // The server is gone: `pending` in flight.
    EXPECT_GE(*frame, writer.last_frame) << writer.world;
    writer.last_frame = *frame;
    writer.model = std::move(next);
    writer.pending.reset();
    ++writer.acknowledged;
  }
}

// Writers on three worlds: ticking at 100 Hz, driven, and ticking at 30 Hz
// written through ApplyStream.
inline std::vector<Writer> ThreeWriters() {
  std::vector<Writer> writers;
  writers.push_back({.world = "tick",
                     .options = {.mode = FrameMode::kTick, .tick_hz = 100},
                     .random = RandomBatches(1, 1)});
  writers.push_back({.world = "driven",
                     .options = {.mode = FrameMode::kDriven},
                     .random = RandomBatches(2, 1)});
  writers.push_back({.world = "streamed",
                     .options = {.mode = FrameMode::kTick, .tick_hz = 30},
                     .streamed = true,
                     .random = RandomBatches(3, 1)});
  return writers;
}

// After a restart (or on another node): whether the server's world is
// the writer's model, or its model and the batch that was in flight, and
// never anything between (batches are atomic). The model takes the batch
// in flight if it landed (`landed`), and the writer goes on from there.
// Empty, or what differs.
inline std::string Settle(Client& client, Writer& w, bool* landed) {
  *landed = false;
  std::string differs = Differs(client, w.world, w.model);
  if (!differs.empty()) {
    if (!w.pending.has_value()) return differs;
    World with_pending = w.model;
    if (!with_pending.Apply(*w.pending).ok()) return "in flight: no batch";
    const std::string also = Differs(client, w.world, with_pending);
    if (!also.empty()) {
      return absl::StrCat("neither the acknowledged batches (", differs,
                          ") nor them and the one in flight (", also, ")");
    }
    w.model = std::move(with_pending);
    *landed = true;
  }
  w.pending.reset();
  w.random.Adopt(w.model);
  return "";
}

}  // namespace xform::testing

#endif  // XFORM_TESTS_ACKNOWLEDGED_WRITES_H_
