// Copyright 2026 The xform Authors.

#include "server/cluster/nats_link.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/log.h"
#include "xform/config/cluster.pb.h"

namespace xform::server {
namespace {

// Room left in each message for its headers.
constexpr int64_t kHeaderRoom = 4096;
constexpr char kIdentityKey[] = "identity";

std::string RandomUid() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8));
}

// TLS and credentials to the NATS servers, as the node's options name them.
absl::Status SetCredentials(const ClusterOptions& options, natsOptions* opts) {
  if (!options.ca_file.empty()) {
    if (natsStatus s = natsOptions_SetSecure(opts, true); s != NATS_OK) {
      return NatsError("cannot ask for TLS", s);
    }
    if (natsStatus s = natsOptions_LoadCATrustedCertificates(
            opts, options.ca_file.c_str());
        s != NATS_OK) {
      return NatsError(
          absl::StrCat("cannot use --cluster_ca_file ", options.ca_file), s);
    }
  }
  if (!options.cert_file.empty()) {
    natsOptions_SetSecure(opts, true);
    if (natsStatus s = natsOptions_LoadCertificatesChain(
            opts, options.cert_file.c_str(), options.key_file.c_str());
        s != NATS_OK) {
      return NatsError(
          absl::StrCat("cannot use --cluster_cert_file ", options.cert_file,
                       " and --cluster_key_file ", options.key_file),
          s);
    }
  }
  if (!options.creds_file.empty()) {
    if (natsStatus s = natsOptions_SetUserCredentialsFromFiles(
            opts, options.creds_file.c_str(), nullptr);
        s != NATS_OK) {
      return NatsError(
          absl::StrCat("cannot use --cluster_creds_file ", options.creds_file),
          s);
    }
  }
  if (!options.token.empty()) {
    natsOptions_SetToken(opts, options.token.c_str());
  }
  return absl::OkStatus();
}

// The options a connection is made with, from the node's; null and why
// when a file they name cannot be used.
absl::StatusOr<natsOptions*> MakeOptions(const ClusterOptions& options) {
  natsOptions* opts = nullptr;
  if (natsOptions_Create(&opts) != NATS_OK) {
    return absl::InternalError("cannot make NATS options");
  }
  std::vector<const char*> servers;
  for (const std::string& server : options.servers) {
    servers.push_back(server.c_str());
  }
  natsOptions_SetServers(opts, servers.data(),
                         static_cast<int>(servers.size()));
  natsOptions_SetName(opts, options.node.c_str());
  // In the order given: a node lists its own machine's NATS server first.
  natsOptions_SetNoRandomize(opts, true);
  if (absl::Status s = SetCredentials(options, opts); !s.ok()) {
    natsOptions_Destroy(opts);
    return s;
  }
  // Once connected, for ever reconnected.
  natsOptions_SetMaxReconnect(opts, -1);
  natsOptions_SetReconnectWait(opts, 100);
  // Nothing is held back while disconnected to be sent after: a record a
  // world's log gave up on must never be stored later, behind what the
  // node did since (a reload, another writer). Publications fail at once
  // instead, and the log sends them again itself, with their ids.
  natsOptions_SetReconnectBufSize(opts, 1);
  return opts;
}

}  // namespace

absl::Status NatsError(absl::string_view what, natsStatus status,
                       jsErrCode code) {
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  return absl::UnavailableError(absl::StrCat(
      what, what.empty() ? "" : ": ", natsStatus_GetText(status),
      detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                           : "",
      code != 0 ? absl::StrCat(" (JetStream error ", code, ")") : ""));
}

std::string DescribeCluster(const ClusterOptions& options) {
  return absl::StrCat(
      options.replicas, " NATS replica(s) a stream via ",
      absl::StrJoin(options.servers, ","), " as node '", options.node, "'",
      options.address.empty() ? "" : absl::StrCat(" at ", options.address),
      ", records acknowledged within ",
      absl::FormatDuration(options.write_timeout), ", writers' leases ",
      absl::FormatDuration(options.lease));
}

absl::StatusOr<std::shared_ptr<NatsLink>> NatsLink::Connect(
    const ClusterOptions& options) {
  absl::StatusOr<natsOptions*> opts = MakeOptions(options);
  if (!opts.ok()) return opts.status();
  auto link = std::shared_ptr<NatsLink>(new NatsLink());
  natsOptions_SetReconnectedCB(*opts, &NatsLink::OnReconnected, link.get());
  // The first connection is tried until the deadline (servers starting),
  // so that what refuses it (a wrong token, a certificate) is told.
  natsStatus status = NATS_OK;
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  absl::Status why;
  while ((status = natsConnection_Connect(&link->nc_, *opts)) != NATS_OK) {
    why = NatsError("", status);
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  natsOptions_Destroy(*opts);
  if (status != NATS_OK) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to the cluster's NATS servers within ",
        absl::FormatDuration(options.connect_timeout), ": ", why.message()));
  }
  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.Wait = 5000;
  status = natsConnection_JetStream(&link->js_, link->nc_, &js_options);
  if (status != NATS_OK) return NatsError("no JetStream context", status);
  // JetStream itself may still be electing its leaders: asked until the
  // deadline too.
  for (bool warned = false;; absl::SleepFor(absl::Milliseconds(200))) {
    absl::Status made = link->MakeBuckets(options);
    if (made.ok()) made = link->JoinIdentity(options);
    if (made.ok()) break;
    if (!absl::IsUnavailable(made) || absl::Now() >= deadline) {
      return absl::Status(
          made.code(), absl::StrCat("the cluster's buckets: ", made.message()));
    }
    if (!warned) {
      Log('W', "waiting for JetStream: ", made.message());
      warned = true;
    }
  }
  return link;
}

NatsLink::~NatsLink() {
  for (kvStore* kv : {owners_, nodes_, worlds_, identity_}) kvStore_Destroy(kv);
  jsCtx_Destroy(js_);
  natsConnection_Destroy(nc_);
}

void NatsLink::OnReconnected(natsConnection*, void* closure) {
  static_cast<NatsLink*>(closure)->reconnected_.store(true);
}

absl::StatusOr<kvStore*> NatsLink::Bucket(const char* name, absl::Duration ttl,
                                          int replicas) {
  kvStore* kv = nullptr;
  natsStatus status = js_KeyValue(&kv, js_, name);
  if (status == NATS_OK) return kv;
  kvConfig config;
  kvConfig_Init(&config);
  config.Bucket = name;
  config.History = 1;
  config.TTL = ttl == absl::ZeroDuration() ? 0 : absl::ToInt64Nanoseconds(ttl);
  config.StorageType = js_FileStorage;
  config.Replicas = replicas;
  status = js_CreateKeyValue(&kv, js_, &config);
  if (status != NATS_OK) {
    return NatsError(absl::StrCat("cannot make the bucket ", name), status);
  }
  return kv;
}

absl::Status NatsLink::MakeBuckets(const ClusterOptions& options) {
  struct Wanted {
    const char* name;
    absl::Duration ttl;
    kvStore** kv;
  };
  for (const Wanted& wanted : {
           Wanted{"XFORM_OWNERS", options.lease, &owners_},
           Wanted{"XFORM_NODES", 3 * options.lease, &nodes_},
           Wanted{"XFORM_WORLDS", absl::ZeroDuration(), &worlds_},
           Wanted{"XFORM_CLUSTER", absl::ZeroDuration(), &identity_},
       }) {
    if (*wanted.kv != nullptr) continue;
    absl::StatusOr<kvStore*> kv =
        Bucket(wanted.name, wanted.ttl, options.replicas);
    if (!kv.ok()) return kv.status();
    *wanted.kv = *kv;
  }
  return absl::OkStatus();
}

absl::Status NatsLink::JoinIdentity(const ClusterOptions& options) {
  config::ClusterIdentity identity;
  identity.set_uid(RandomUid());
  identity.set_created_unix_nanos(absl::ToUnixNanos(absl::Now()));
  identity.set_created_by(options.node);
  const std::string bytes = identity.SerializeAsString();
  if (kvStore_Create(nullptr, identity_, kIdentityKey, bytes.data(),
                     static_cast<int>(bytes.size())) == NATS_OK) {
    cluster_ = identity.uid();
    Log('I', "cluster: this node made the cluster ", cluster_);
    return absl::OkStatus();
  }
  kvEntry* entry = nullptr;
  if (natsStatus s = kvStore_Get(&entry, identity_, kIdentityKey);
      s != NATS_OK) {
    return NatsError("cannot read the cluster's identity", s);
  }
  const bool parsed =
      identity.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
  kvEntry_Destroy(entry);
  if (!parsed || identity.uid().empty()) {
    return absl::DataLossError("the cluster's identity does not parse");
  }
  cluster_ = identity.uid();
  Log('I', "cluster: joined cluster ", cluster_, " (made by node ",
      Quoted(identity.created_by()), ")");
  return absl::OkStatus();
}

absl::Status NatsLink::CheckIdentity() {
  kvEntry* entry = nullptr;
  if (natsStatus s = kvStore_Get(&entry, identity_, kIdentityKey);
      s != NATS_OK) {
    return NatsError("cannot read the cluster's identity", s);
  }
  config::ClusterIdentity identity;
  const bool parsed =
      identity.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
  kvEntry_Destroy(entry);
  if (!parsed || identity.uid() != cluster_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NATS servers now hold another cluster (", identity.uid(),
        ", made by node ", Quoted(identity.created_by()), ") than the one ",
        "this node joined (", cluster_,
        "): --cluster names servers of two "
        "deployments"));
  }
  return absl::OkStatus();
}

size_t NatsLink::chunk_bytes() const {
  const int64_t max_payload = natsConnection_GetMaxPayload(nc_);
  return static_cast<size_t>(
      std::max<int64_t>(max_payload - kHeaderRoom, kHeaderRoom));
}

absl::StatusOr<uint64_t> NatsLink::PublishSync(
    natsMsg* msg, const std::string& id, absl::string_view what,
    std::optional<uint64_t> expect_last) {
  if (msg == nullptr) return absl::InternalError("cannot make a message");
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.MsgId = id.c_str();
  if (expect_last) options.ExpectLastSeq = *expect_last;
  jsPubAck* ack = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status = js_PublishMsg(&ack, js_, msg, &options, &code);
  natsMsg_Destroy(msg);
  if (code == JSStreamWrongLastSequenceErr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": another writer appended first (JetStream error 10071)"));
  }
  if (status != NATS_OK) return NatsError(what, status, code);
  const uint64_t seq = ack->Sequence;
  jsPubAck_Destroy(ack);
  return seq;
}

absl::StatusOr<StreamExtent> NatsLink::Extent(const std::string& stream) {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status =
      js_GetStreamInfo(&info, js_, stream.c_str(), nullptr, &code);
  if (code == JSStreamNotFoundErr || status == NATS_NOT_FOUND) {
    return absl::NotFoundError(absl::StrCat(stream, " is gone"));
  }
  if (status != NATS_OK) {
    return NatsError(absl::StrCat("cannot read ", stream), status, code);
  }
  const StreamExtent extent{.first = info->State.FirstSeq,
                            .last = info->State.LastSeq,
                            .messages = info->State.Msgs};
  jsStreamInfo_Destroy(info);
  return extent;
}

absl::Status NatsLink::DeleteBefore(const std::string& stream, uint64_t seq) {
  absl::StatusOr<StreamExtent> extent = Extent(stream);
  if (!extent.ok()) return extent.status();
  for (uint64_t at = extent->first; at < seq && at <= extent->last; ++at) {
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_DeleteMsg(js_, stream.c_str(), at, nullptr, &code);
    // One removed already (an earlier pass cut short) is no error.
    if (status != NATS_OK && status != NATS_NOT_FOUND && code != 10037) {
      return NatsError(
          absl::StrCat("cannot remove ", stream, "'s message ", at), status,
          code);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> NatsLink::Read(
    const std::string& stream, const std::string& subject, uint64_t start,
    absl::FunctionRef<absl::Status(natsMsg* msg)> visit) {
  absl::StatusOr<StreamExtent> extent = Extent(stream);
  if (!extent.ok()) return extent.status();
  if (extent->messages == 0 || extent->last < start) return extent->last;
  jsSubOptions options;
  jsSubOptions_Init(&options);
  options.Stream = stream.c_str();
  options.Ordered = true;
  options.Config.DeliverPolicy = js_DeliverByStartSequence;
  options.Config.OptStartSeq = std::max(start, extent->first);
  natsSubscription* sub = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus status =
      js_SubscribeSync(&sub, js_, subject.c_str(), nullptr, &options, &code);
  if (status != NATS_OK) {
    return NatsError(absl::StrCat("cannot follow ", stream), status, code);
  }
  natsSubscription_SetPendingLimits(sub, -1, -1);
  absl::Status read;
  for (uint64_t seq = 0; seq < extent->last && read.ok();) {
    natsMsg* msg = nullptr;
    status = natsSubscription_NextMsg(&msg, sub, 10000);
    if (status != NATS_OK) {
      read = NatsError(absl::StrCat("reading ", stream), status);
      break;
    }
    seq = std::max(seq, StreamSequence(msg));
    read = visit(msg);
    natsMsg_Destroy(msg);
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  if (!read.ok()) return read;
  return extent->last;
}

absl::Status NatsLink::ReadFromLeader(
    const std::string& stream,
    absl::FunctionRef<absl::Status(natsMsg* msg)> visit) {
  absl::StatusOr<StreamExtent> extent = Extent(stream);
  if (!extent.ok()) return extent.status();
  if (extent->messages == 0) return absl::OkStatus();
  for (uint64_t seq = extent->first; seq <= extent->last; ++seq) {
    natsMsg* msg = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_GetMsg(&msg, js_, stream.c_str(), seq, nullptr, &code);
    // Purged or deleted since the extent was read (JetStream error 10037).
    if (status == NATS_NOT_FOUND || code == 10037) continue;
    if (status != NATS_OK) {
      return NatsError(absl::StrCat("cannot read ", stream), status, code);
    }
    absl::Status visited = visit(msg);
    natsMsg_Destroy(msg);
    if (!visited.ok()) return visited;
  }
  return absl::OkStatus();
}

absl::Status NatsLink::AddStream(const std::string& stream,
                                 const std::string& subject, int replicas) {
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const char* subjects[] = {subject.c_str()};
  config.Name = stream.c_str();
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Replicas = replicas;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status = js_AddStream(nullptr, js_, &config, nullptr, &code);
  if (code == JSStreamNameExistErr) {
    return absl::AlreadyExistsError(
        absl::StrCat(stream, " already exists in the cluster"));
  }
  return status == NATS_OK
             ? absl::OkStatus()
             : NatsError(absl::StrCat("cannot make ", stream), status, code);
}

absl::Status NatsLink::DeleteStream(const std::string& stream) {
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status =
      js_DeleteStream(js_, stream.c_str(), nullptr, &code);
  if (status == NATS_OK || code == JSStreamNotFoundErr ||
      status == NATS_NOT_FOUND) {
    return absl::OkStatus();
  }
  return NatsError(absl::StrCat("cannot delete ", stream), status, code);
}

absl::string_view Header(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || value == nullptr) {
    return "";
  }
  return value;
}

uint64_t HeaderNumber(natsMsg* msg, const char* key, uint64_t otherwise) {
  uint64_t value = 0;
  return absl::SimpleAtoi(Header(msg, key), &value) ? value : otherwise;
}

absl::string_view Data(natsMsg* msg) {
  return absl::string_view(natsMsg_GetData(msg),
                           static_cast<size_t>(natsMsg_GetDataLength(msg)));
}

uint64_t StreamSequence(natsMsg* msg) {
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) return 0;
  const uint64_t seq = meta->Sequence.Stream;
  jsMsgMetaData_Destroy(meta);
  return seq;
}

natsMsg* MakeMessage(
    const std::string& subject, absl::string_view data,
    std::initializer_list<std::pair<const char*, std::string>> headers) {
  natsMsg* msg = nullptr;
  if (natsMsg_Create(&msg, subject.c_str(), nullptr, data.data(),
                     static_cast<int>(data.size())) != NATS_OK) {
    return nullptr;
  }
  for (const auto& [key, value] : headers) {
    natsMsgHeader_Set(msg, key, value.c_str());
  }
  return msg;
}

}  // namespace xform::server
