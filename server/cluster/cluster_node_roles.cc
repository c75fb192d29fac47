// Copyright 2026 The xform Authors.
//
// ClusterNode: each held world's role and its changes (the diagram in
// cluster_node.h): a step by role, leases taken, renewed and given up, a
// world taken (Promote), stepped down from, reloaded, handed off.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/cluster/cluster_node.h"
#include "server/cluster/cluster_node_internal.h"
#include "server/cluster/log_records.h"
#include "server/storage/snapshot_file.h"

namespace xform::server {

using cluster_internal::kStepDownWait;
using cluster_internal::LeaseBytes;
using cluster_internal::Moving;
using cluster_internal::NoWriter;
using cluster_internal::RandomId;
using cluster_internal::WritesOf;

absl::string_view ClusterNode::RoleName(Role role) {
  switch (role) {
    case Role::kLoading:
      return "loading";
    case Role::kWedged:
      return "wedged";
    case Role::kFollowing:
      return "following";
    case Role::kTaking:
      return "taking";
    case Role::kWriting:
      return "writing";
  }
  return "?";
}

void ClusterNode::Become(Held& held, Role role) {
  const Role from = held.role;
  bool drawn = false;  // Whether the diagram in cluster_node.h has it.
  switch (role) {
    case Role::kLoading:  // Reload() starts from anywhere but a take.
      drawn = from != Role::kTaking;
      break;
    case Role::kWedged:
      drawn = from == Role::kLoading || from == Role::kWedged;
      break;
    case Role::kFollowing:
      drawn = from == Role::kLoading || from == Role::kTaking ||
              from == Role::kWriting;
      break;
    case Role::kTaking:
      drawn = from == Role::kFollowing;
      break;
    case Role::kWriting:
      drawn = from == Role::kTaking;
      break;
  }
  if (!drawn) {
    Log('E', "world '", EscapeForLog(held.name), "': its role went from ",
        RoleName(from), " to ", RoleName(role),
        ", which cluster_node.h's diagram does not have");
  }
  held.role = role;
}

void ClusterNode::StepWorld(Held& held) {
  const absl::Time now = clock_.Now();
  switch (held.role) {
    case Role::kWriting:
      StepWriter(held, now);
      return;
    case Role::kTaking:  // Only within Promote().
      return;
    case Role::kFollowing:
      if (now - held.checked >= options_.lease) {
        held.checked = now;
        held.follower->CheckFallenBehind(options_.lease).IgnoreError();
      }
      if (!held.follower->failed().ok()) Become(held, Role::kLoading);
      break;
    case Role::kLoading:
    case Role::kWedged:
      break;
  }
  if (held.role != Role::kFollowing && now >= held.reload_after) {
    Reload(held);
  }
  // Its writes stay refused, saying why, until an operator skips the
  // record (SkipRecord): no node can take a world it cannot load.
  if (held.role == Role::kWedged) return;
  absl::StatusOr<std::optional<config::OwnerLease>> lease =
      ReadLease(held.key, &held.lease_seen);
  if (!lease.ok()) return;  // Cut off: it serves what it has, unconfirmed.
  held.confirmed = now;
  // Writes are told to try again rather than sent to a writer likely lost.
  RefuseWrites(held, Unrenewed(held.lease_seen)
                         ? std::optional<config::OwnerLease>()
                         : *lease);
  if (lease->has_value() || draining_ || leaving_) return;
  // Only a follower takes a world: what it applied is the log's.
  if (held.role == Role::kFollowing) TryToTake(held, now);
}

void ClusterNode::StepWriter(Held& held, absl::Time now) {
  if (absl::Status broken = held.log->broken(); !broken.ok()) {
    StepDown(held, broken.message(), /*release=*/true);
    return;
  }
  if (draining_) {
    StepDown(held, "this node drains", /*release=*/true);
    return;
  }
  if (now - held.renewed >= options_.lease / 4) RenewLease(held, now);
}

void ClusterNode::TryToTake(Held& held, absl::Time now) {
  const uint64_t epoch = std::max(held.epoch, held.follower->epoch()) + 1;
  const std::string bytes = LeaseBytes(options_, epoch);
  uint64_t revision = 0;
  if (kvStore_Create(&revision, link_->owners(), held.key.c_str(), bytes.data(),
                     static_cast<int>(bytes.size())) != NATS_OK) {
    return;  // Another node was first.
  }
  held.lease_revision = revision;
  held.renewed = now;
  held.epoch = epoch;
  if (!Promote(held)) {
    ReleaseLease(held);
    held.lease_revision = 0;
  }
}

void ClusterNode::RenewLease(Held& held, absl::Time now) {
  uint64_t revision = 0;
  const std::string lease = LeaseBytes(options_, held.epoch);
  const natsStatus s =
      kvStore_Update(&revision, link_->owners(), held.key.c_str(), lease.data(),
                     static_cast<int>(lease.size()), held.lease_revision);
  if (s == NATS_OK) {
    held.lease_revision = revision;
    held.renewed = held.confirmed = now;
  } else if (s == NATS_ERR) {
    // JetStream answered: the lease expired (this node paused, or the
    // bucket's NATS leader was lost for longer than a lease), and perhaps
    // another took it. Where none did, this node takes it again and
    // writes on: its appends expect the log's end, so a node that took
    // the world meanwhile and began an epoch fences it all the same.
    if (kvStore_Create(&revision, link_->owners(), held.key.c_str(),
                       lease.data(),
                       static_cast<int>(lease.size())) == NATS_OK) {
      held.lease_revision = revision;
      held.renewed = held.confirmed = now;
      Log('W', "world '", EscapeForLog(held.name),
          "': its lease expired before it was renewed, and was taken "
          "again");
    } else {
      StepDown(held, "its lease was lost", /*release=*/false);
    }
  }
  // Otherwise NATS did not answer: the log fences this node if another
  // takes the world meanwhile.
}

absl::StatusOr<std::optional<config::OwnerLease>> ClusterNode::ReadLease(
    const std::string& key, LeaseSeen* seen) {
  kvEntry* entry = nullptr;
  const natsStatus s = kvStore_Get(&entry, link_->owners(), key.c_str());
  if (s == NATS_NOT_FOUND) {
    if (seen != nullptr) *seen = {};
    return std::nullopt;
  }
  if (s != NATS_OK) return NatsError("cannot read a lease", s);
  config::OwnerLease lease;
  const bool parsed =
      lease.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
  const uint64_t revision = kvEntry_Revision(entry);
  kvEntry_Destroy(entry);
  if (!parsed) return absl::DataLossError("a lease that does not parse");
  if (seen != nullptr && revision != seen->revision) {
    *seen = {revision, clock_.Now()};
  }
  return lease;
}

bool ClusterNode::Unrenewed(const LeaseSeen& seen) const {
  // Its writer renews it every quarter lease: one unrenewed for half a
  // lease names a writer that is likely lost (a node killed, cut off or
  // paused). Counted on this node's clock alone, so the nodes' clocks need
  // not agree.
  return seen.revision != 0 && clock_.Now() - seen.changed > options_.lease / 2;
}

void ClusterNode::RefuseWrites(Held& held,
                               const std::optional<config::OwnerLease>& lease) {
  const xform::server::Redirect writer =
      lease ? xform::server::Redirect{lease->node(), lease->address()}
            : xform::server::Redirect{};
  if (writer.node == held.writer.node &&
      writer.address == held.writer.address) {
    return;
  }
  held.writer = writer;
  held.world->StopWriting(lease && lease->node() != options_.node
                              ? RedirectTo(WritesOf(held.name), writer)
                              : NoWriter(held.name));
}

void ClusterNode::Follow(Held& held, uint64_t next_seq) {
  held.follower = std::make_unique<WorldFollower>(link_, held.world, held.key);
  if (absl::Status s = held.follower->Start(next_seq, held.epoch); !s.ok()) {
    Log('W', "world '", EscapeForLog(held.name), "': ", s.message(),
        "; trying again");
    held.follower.reset();  // The next step reloads it.
    Become(held, Role::kLoading);
    return;
  }
  Become(held, Role::kFollowing);
}

std::optional<uint64_t> ClusterNode::ReadToEnd(Held& held) {
  absl::StatusOr<StreamExtent> extent = link_->Extent(LogStream(held.key));
  if (!extent.ok()) {
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take it: ", extent.status().message());
    return std::nullopt;
  }
  // At most a lease: the wait holds ops_mu_, and a node that waited ten
  // seconds let every other lease it held expire meanwhile (the crash loop
  // saw it). One that cannot catch up by then gives the world up for now.
  if (held.follower == nullptr ||
      !held.follower->WaitConsumed(extent->last, options_.lease)) {
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take it: its log was not read to its end (", extent->last,
        ")");
    return std::nullopt;
  }
  return extent->last;
}

bool ClusterNode::Promote(Held& held) {
  Become(held, Role::kTaking);
  // Everything up to the log's end, applied.
  const std::optional<uint64_t> end = ReadToEnd(held);
  if (!end) {
    Become(held,
           held.follower->failed().ok() ? Role::kFollowing : Role::kLoading);
    return false;
  }
  held.follower->Stop();
  held.epoch = std::max(held.epoch, held.follower->epoch() + 1);
  // The epoch expects the log's end: a writer that appended since (one
  // thought lost, but paused) fences this node instead.
  // An id of its own: epochs are numbered from what a node read, and a
  // number seen twice must not be taken as a duplicate.
  const std::string epoch_id =
      absl::StrCat("epoch:", options_.node, ":", RandomId());
  absl::StatusOr<uint64_t> epoch_seq =
      link_->PublishSync(MakeMessage(LogSubject(held.key), "",
                                     {{kClusterHeader, link_->cluster()},
                                      {"Xform-Epoch", absl::StrCat(held.epoch)},
                                      {"Xform-Node", options_.node}}),
                         epoch_id, "cannot begin an epoch", *end);
  if (!epoch_seq.ok()) {
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take it: ", epoch_seq.status().message());
    Follow(held, held.follower->applied_seq() + 1);
    return false;
  }
  held.follower.reset();
  // Its snapshots say in which epoch they were taken.
  config::StoredWorld stored;
  stored.ParseFromString(held.stored);
  stored.set_epoch(held.epoch);
  held.log =
      MakeLog(held.name, stored.SerializeAsString(), *epoch_seq, epoch_id);
  if (absl::Status s = held.log->FenceSnapshots(); !s.ok()) {
    // Its snapshots could be another's: not written here until they are
    // its own (the next step tries again).
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take its snapshots: ", s.message());
    held.log.reset();
    Follow(held, *epoch_seq + 1);
    return false;
  }
  held.writer = {options_.node, options_.address};
  Become(held, Role::kWriting);
  held.world->StartWriting(held.log);
  Log('I', "world '", EscapeForLog(held.name), "': written here from epoch ",
      held.epoch, " (its log at ", *epoch_seq, ")");
  return true;
}

void ClusterNode::ReleaseLease(const Held& held) {
  // A delete that expects the lease's revision, as KV's own delete is made
  // (a KV-Operation header): another node's lease is never removed.
  natsMsg* msg = MakeMessage(absl::StrCat("$KV.XFORM_OWNERS.", held.key), "",
                             {{"KV-Operation", "DEL"}});
  if (msg == nullptr) return;
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.ExpectLastSubjectSeq = held.lease_revision;
  jsErrCode code = static_cast<jsErrCode>(0);
  js_PublishMsg(nullptr, link_->js(), msg, &options, &code);
  natsMsg_Destroy(msg);
}

void ClusterNode::StepDown(Held& held, absl::string_view why, bool release) {
  held.world->StopWriting(Moving(held.name));
  absl::StatusOr<uint64_t> stored = held.log->WaitStored(kStepDownWait);
  held.log.reset();
  if (release) ReleaseLease(held);
  held.lease_revision = 0;
  held.writer = {};
  Log('I', "world '", EscapeForLog(held.name), "': no longer written here (",
      why, ")");
  if (stored.ok()) {
    // Its world holds what its log holds: it follows on from there.
    Follow(held, *stored + 1);
  } else {
    Reload(held);
  }
}

void ClusterNode::Reload(Held& held) {
  held.follower.reset();
  if (held.role != Role::kWedged) Become(held, Role::kLoading);
  absl::StatusOr<LoadedWorld> loaded = LoadWorld(*link_, held.key, clock_);
  if (!loaded.ok()) {
    if (const std::optional<uint64_t> record = BadRecordOf(loaded.status())) {
      // Wedged: every load stops at this record. Said to its writers
      // (DATA_LOSS, not "try again"), in GetWorld, and in the node's
      // health, and tried again every few seconds (an operator may have
      // skipped it at another node).
      if (held.wedged.ok()) {
        Log('E', "world '", EscapeForLog(held.name),
            "' is wedged: ", loaded.status().message(),
            "; serving what it holds. To skip "
            "the record (losing what it held): xformctl worlds skip-record ",
            EscapeForLog(held.name), " ", *record);
      }
      held.wedged = loaded.status();
      Become(held, Role::kWedged);
      held.reload_after = clock_.Now() + 4 * options_.lease;
      held.writer = {};
      held.world->StopWriting(absl::DataLossError(
          absl::StrCat("world ", Quoted(held.name),
                       " is wedged: ", loaded.status().message(),
                       "; its writes are refused until an "
                       "operator skips record ",
                       *record,
                       " (docs/cluster.md, \"A wedged "
                       "world\")")));
      TellWedged();
      return;
    }
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot reload it: ", loaded.status().message(),
        "; serving what it holds");
    return;  // Tried again at the next step.
  }
  if (!held.wedged.ok()) {
    Become(held, Role::kLoading);
    Log('I', "world '", EscapeForLog(held.name), "' is no longer wedged");
    held.wedged = absl::OkStatus();
    held.world->StopWriting(NoWriter(held.name));  // Until its lease is read.
    TellWedged();
  }
  held.world->Reset(loaded->recovered);
  held.epoch = loaded->epoch;
  Log('I', "world '", EscapeForLog(held.name), "': reloaded (frame ",
      loaded->recovered.last_frame, ", its log at ", loaded->last_seq, ")");
  Follow(held, loaded->last_seq + 1);
}

uint32_t ClusterNode::HandOffAll() {
  // Those created here since the last step too (a drain right after a
  // create handed over all but the newest).
  TakeInCreated();
  uint32_t moved = 0;
  for (auto& [name, held] : held_) {
    if (held->role != Role::kWriting) continue;
    StepDown(*held, "handed to another node", /*release=*/true);
    Publish(*held);
    ++moved;
  }
  return moved;
}

absl::StatusOr<uint32_t> ClusterNode::Drain(absl::string_view node,
                                            bool drain) {
  if (node != options_.node) {
    absl::MutexLock lock(&view_mu_);
    for (const NodeView& other : nodes_) {
      if (other.name == node) {
        return RedirectTo(absl::StrCat("drains of node ", Quoted(node)),
                          {other.name, other.address});
      }
    }
    return absl::NotFoundError(absl::StrCat("no node ", Quoted(node)));
  }
  uint32_t moved = 0;
  {
    absl::MutexLock lock(&ops_mu_);
    draining_ = drain;
    if (drain) moved = HandOffAll();
  }
  Log('I', "cluster: this node ", drain ? "drains" : "takes worlds again",
      drain ? absl::StrCat(": ", moved, " world(s) handed to other nodes")
            : "");
  KeepEntry();
  return moved;
}

}  // namespace xform::server
