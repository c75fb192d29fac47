// Copyright 2026 The xform Authors.

#include "tools/ctl_record.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glm/glm.hpp"
#include "nlohmann/json.hpp"
#include "tools/foxglove/transforms.h"
#include "tools/mcap/mcap.h"

namespace xform::tools {
namespace {

using foxglove_io::EntityOfFrameId;
using foxglove_io::FrameId;

constexpr char kDestroyedSchema[] =
    R"({"type":"object","properties":{"frame_ids":)"
    R"({"type":"array","items":{"type":"string"}}}})";

// Wakes the recorder when its mirror takes in a frame.
class FrameSignal {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    ++frames_;
    cv_.notify_one();
  }
  // Waits for a frame since the last call, up to `timeout`.
  bool Wait(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool got = cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                                  [&] { return frames_ > 0; });
    frames_ = 0;
    return got;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t frames_ = 0;
};

}  // namespace

namespace {

// The recording's file: its channels, and each frame's messages.
class RecordingFile {
 public:
  absl::Status Open(const std::string& path, const std::string& world) {
    absl::StatusOr<std::unique_ptr<mcap::McapWriter>> writer =
        mcap::McapWriter::Open(path);
    if (!writer.ok()) return writer.status();
    writer_ = *std::move(writer);
    const std::map<std::string, std::string> metadata = {
        {"xform.world", world}};
    absl::StatusOr<uint16_t> tf_schema =
        writer_->AddSchema("foxglove.FrameTransforms", "protobuf",
                           foxglove_io::FileDescriptorSetOf(
                               foxglove::FrameTransforms::descriptor()));
    if (!tf_schema.ok()) return tf_schema.status();
    absl::StatusOr<uint16_t> tf =
        writer_->AddChannel(*tf_schema, kTransformsTopic, "protobuf", metadata);
    if (!tf.ok()) return tf.status();
    absl::StatusOr<uint16_t> destroyed_schema =
        writer_->AddSchema("xform.Destroyed", "jsonschema", kDestroyedSchema);
    if (!destroyed_schema.ok()) return destroyed_schema.status();
    absl::StatusOr<uint16_t> destroyed = writer_->AddChannel(
        *destroyed_schema, kDestroyedTopic, "json", metadata);
    if (!destroyed.ok()) return destroyed.status();
    absl::StatusOr<uint16_t> scene_schema = writer_->AddSchema(
        "foxglove.SceneUpdate", "protobuf",
        foxglove_io::FileDescriptorSetOf(foxglove::SceneUpdate::descriptor()));
    if (!scene_schema.ok()) return scene_schema.status();
    absl::StatusOr<uint16_t> scene =
        writer_->AddChannel(*scene_schema, kSceneTopic, "protobuf", metadata);
    if (!scene.ok()) return scene.status();
    transforms_ = *tf;
    destroyed_ = *destroyed;
    scene_ = *scene;
    return absl::OkStatus();
  }

  // One frame the mirror took in: its destroys, then its transforms.
  absl::Status Write(const MirrorChangedState& state, RecordSummary& summary) {
    const auto stamp = static_cast<uint64_t>(state.stamp);
    const auto sequence = static_cast<uint32_t>(state.frame);
    if (!state.destroyed.empty()) {
      nlohmann::json ids = nlohmann::json::array();
      for (EntityId e : state.destroyed) ids.push_back(FrameId(e));
      const std::string json = nlohmann::json{{"frame_ids", ids}}.dump();
      if (absl::Status s =
              writer_->Write(destroyed_, sequence, stamp, stamp, json);
          !s.ok()) {
        return s;
      }
      summary.destroyed += state.destroyed.size();
    }
    if (!state.entities.empty()) {
      encoder_.Encode(state, state.stamp, &bytes_);
      if (absl::Status s =
              writer_->Write(transforms_, sequence, stamp, stamp, bytes_);
          !s.ok()) {
        return s;
      }
      summary.transforms += state.entities.size();
    }
    ++summary.messages;
    return WriteScene(state, sequence, stamp);
  }

  absl::Status Close() { return writer_->Close(); }

 private:
  // The entities to draw: those new to the recording, or whose scale
  // changed; and the destroyed, deleted.
  absl::Status WriteScene(const MirrorChangedState& state, uint32_t sequence,
                          uint64_t stamp) {
    std::vector<size_t> drawn;
    for (size_t k = 0; k < state.entities.size(); ++k) {
      const glm::vec3 scale = foxglove_io::ScaleOf(state.worlds[k]);
      auto [it, added] = scales_.try_emplace(state.entities[k], scale);
      if (added || glm::any(glm::greaterThan(glm::abs(it->second - scale),
                                             glm::vec3(1e-6f)))) {
        it->second = scale;
        drawn.push_back(k);
      }
    }
    for (EntityId e : state.destroyed) scales_.erase(e);
    if (drawn.empty() && state.destroyed.empty()) return absl::OkStatus();
    foxglove_io::SceneUpdateOf(state, state.stamp, drawn)
        .SerializeToString(&bytes_);
    return writer_->Write(scene_, sequence, stamp, stamp, bytes_);
  }

  std::unique_ptr<mcap::McapWriter> writer_;
  uint16_t transforms_ = 0;
  uint16_t destroyed_ = 0;
  uint16_t scene_ = 0;
  // What each entity recorded was drawn at: the view's size in memory.
  absl::flat_hash_map<EntityId, glm::vec3> scales_;
  foxglove_io::TransformsEncoder encoder_;
  std::string bytes_;
};

}  // namespace

absl::StatusOr<RecordSummary> RecordWorld(Client& client, MirrorOptions mirror,
                                          const RecordOptions& options) {
  RecordingFile file;
  if (absl::Status s = file.Open(options.out, mirror.world); !s.ok()) return s;
  auto signal = std::make_shared<FrameSignal>();
  mirror.driver = MirrorOptions::Driver::kBackground;
  mirror.on_update = nullptr;
  mirror.on_frame = [signal](uint64_t) { signal->Notify(); };
  absl::StatusOr<std::unique_ptr<Mirror>> subscribed =
      Mirror::Start(client, std::move(mirror));
  if (!subscribed.ok()) return subscribed.status();
  Mirror& view = **subscribed;
  while (!view.WaitForSync(absl::Milliseconds(100))) {
    if (options.stop()) return absl::CancelledError("stopped before the view");
  }
  options.on_started();

  RecordSummary summary;
  for (;;) {
    const MirrorChangedState state =
        view.TakeChangedState(/*with_parent_worlds=*/true);
    if (!state.empty()) {
      if (absl::Status s = file.Write(state, summary); !s.ok()) return s;
      if (options.frames > 0 &&
          summary.messages > static_cast<uint64_t>(options.frames)) {
        break;
      }
    }
    if (options.stop()) break;
    signal->Wait(absl::Milliseconds(100));
  }
  if (absl::Status s = file.Close(); !s.ok()) return s;
  return summary;
}

namespace {

// Writes a recording's messages back as batches.
class Player {
 public:
  Player(Client& client, const PlayOptions& options)
      : client_(client), options_(options) {}

  // The world is created, or must be empty: play creates what it names.
  absl::Status Start() {
    absl::StatusOr<WorldInfo> info = client_.GetWorld(options_.world);
    if (info.ok()) {
      if (info->entities == 0) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("world '", options_.world, "' holds ", info->entities,
                       " entities: play into a new or empty world"));
    }
    if (info.status().code() != absl::StatusCode::kNotFound) {
      return info.status();
    }
    return client_.CreateWorld(options_.world, {.mode = FrameMode::kDriven})
        .status();
  }

  absl::Status OnChannel(const mcap::Channel& channel) {
    if (channel.topic == kTransformsTopic &&
        channel.message_encoding == "protobuf") {
      transforms_channel_ = channel.id;
    } else if (channel.topic == kDestroyedTopic &&
               channel.message_encoding == "json") {
      destroyed_channel_ = channel.id;
    }
    return absl::OkStatus();
  }

  absl::Status OnMessage(const mcap::Message& message) {
    if (message.channel_id != transforms_channel_ &&
        message.channel_id != destroyed_channel_) {
      return absl::OkStatus();  // Someone else's topic.
    }
    // A frame's destroys come before its transforms, at its stamp; a frame
    // of destroys alone is written when the next frame's stamp comes.
    if (!batch_.empty() && message.log_time != batch_stamp_) {
      if (absl::Status s = Flush(); !s.ok()) return s;
    }
    if (absl::Status s = Pace(message.log_time); !s.ok()) return s;
    batch_stamp_ = message.log_time;
    if (message.channel_id == destroyed_channel_) return AddDestroys(message);
    if (absl::Status s = AddTransforms(message); !s.ok()) return s;
    ++summary_.messages;
    return Flush();
  }

  absl::StatusOr<PlaySummary> Finish() {
    if (absl::Status s = Flush(); !s.ok()) return s;
    return summary_;
  }

 private:
  absl::Status Pace(uint64_t log_time) {
    if (options_.stop()) return absl::CancelledError("stopped");
    if (options_.rate <= 0) return absl::OkStatus();
    if (!started_) {
      started_ = true;
      first_log_time_ = log_time;
      wall_start_ = absl::Now();
    }
    const double recorded =
        static_cast<double>(log_time - std::min(log_time, first_log_time_));
    // Pacing a writer to the recording, not waiting for an event.
    absl::SleepFor(wall_start_ + absl::Nanoseconds(recorded / options_.rate) -
                   absl::Now());
    return absl::OkStatus();
  }

  absl::Status AddDestroys(const mcap::Message& message) {
    const nlohmann::json json =
        nlohmann::json::parse(message.data, nullptr, false);
    if (!json.is_object() || !json.contains("frame_ids") ||
        !json["frame_ids"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kDestroyedTopic, ": not {\"frame_ids\": [...]}"));
    }
    for (const nlohmann::json& id : json["frame_ids"]) {
      if (!id.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(kDestroyedTopic, ": a frame id that is not a string"));
      }
      absl::StatusOr<EntityId> entity = EntityOfFrameId(id.get<std::string>());
      if (!entity.ok()) return entity.status();
      if (parent_.erase(*entity) == 0) continue;
      // Each destroyed entity is listed; its children are too.
      batch_.emplace_back(DestroyOp{*entity, DestroyMode::kReparentChildren});
    }
    return absl::OkStatus();
  }

  absl::Status AddTransforms(const mcap::Message& message) {
    foxglove::FrameTransforms transforms;
    if (!transforms.ParseFromArray(message.data.data(),
                                   static_cast<int>(message.data.size()))) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTransformsTopic,
                       ": a message that is not foxglove.FrameTransforms"));
    }
    struct Entry {
      EntityId parent;
      Transform local;
    };
    absl::flat_hash_map<EntityId, Entry> created;
    std::vector<std::pair<EntityId, Entry>> known;
    for (const foxglove::FrameTransform& t : transforms.transforms()) {
      absl::StatusOr<EntityId> child = EntityOfFrameId(t.child_frame_id());
      absl::StatusOr<EntityId> parent = EntityOfFrameId(t.parent_frame_id());
      absl::StatusOr<Transform> local = foxglove_io::LocalOf(t);
      if (!child.ok() || !parent.ok() || !local.ok()) {
        return !child.ok() ? child.status()
                           : (!parent.ok() ? parent.status() : local.status());
      }
      if (*child == kNoEntity) {
        return absl::InvalidArgumentError("a transform of 'world' itself");
      }
      const Entry entry{*parent, *local};
      if (parent_.contains(*child)) {
        known.emplace_back(*child, entry);
      } else {
        created[*child] = entry;
      }
    }
    // Parents before their children.
    absl::flat_hash_set<EntityId> placing;
    std::function<void(EntityId)> create = [&](EntityId e) {
      auto it = created.find(e);
      if (it == created.end() || !placing.insert(e).second) return;
      create(it->second.parent);
      batch_.emplace_back(CreateOp{e, it->second.parent, it->second.local});
      parent_[e] = it->second.parent;
      ++summary_.created;
    };
    for (const auto& [e, entry] : created) create(e);
    for (const auto& [e, entry] : known) {
      if (parent_[e] != entry.parent) {
        batch_.emplace_back(LinkOp{e, entry.parent, LinkMode::kKeepLocal});
        parent_[e] = entry.parent;
      }
      batch_.emplace_back(SetLocalOp{e, entry.local});
    }
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (batch_.empty()) return absl::OkStatus();
    const absl::StatusOr<uint64_t> frame = client_.Apply(
        options_.world, batch_,
        {.end_frame = true,
         .stamp = options_.restamp ? 0 : static_cast<Stamp>(batch_stamp_)});
    batch_.clear();
    if (!frame.ok()) return frame.status();
    ++summary_.frames;
    return absl::OkStatus();
  }

  Client& client_;
  const PlayOptions& options_;
  uint16_t transforms_channel_ = 0;
  uint16_t destroyed_channel_ = 0;
  absl::flat_hash_map<EntityId, EntityId> parent_;  // What the world holds.
  std::vector<Command> batch_;
  uint64_t batch_stamp_ = 0;
  bool started_ = false;
  uint64_t first_log_time_ = 0;
  absl::Time wall_start_;
  PlaySummary summary_;
};

}  // namespace

absl::StatusOr<PlaySummary> PlayRecording(Client& client,
                                          const std::string& path,
                                          const PlayOptions& options) {
  Player player(client, options);
  if (absl::Status s = player.Start(); !s.ok()) return s;
  mcap::ReadCallbacks callbacks;
  callbacks.on_channel = [&](const mcap::Channel& c) {
    return player.OnChannel(c);
  };
  callbacks.on_message = [&](const mcap::Message& m) {
    return player.OnMessage(m);
  };
  if (absl::Status s = mcap::ReadMcap(path, callbacks); !s.ok()) return s;
  return player.Finish();
}

}  // namespace xform::tools
