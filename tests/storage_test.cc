// Copyright 2026 The xform Authors.
//
// Durability's parts without gRPC: CRC32C, the journal's record format (a
// torn tail cut at every byte offset, corruption in the middle), snapshot
// files, and a WorldHost over a data directory rebuilt from its snapshot
// and journal, and refusing writes with UNAVAILABLE when its disk is full.

#include "server/storage/storage.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/host/world_host.h"
#include "server/storage/crc32c.h"
#include "server/storage/journal.h"
#include "server/storage/snapshot_file.h"
#include "tests/random_batches.h"
#include "xform/v1/wire.h"
#include "xform/world.h"

namespace xform::server {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A directory of the test's own, emptied first.
std::string FreshDir(absl::string_view name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "xform_storage_", getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Crc32cTest, KnownValuesAndExtension) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  const std::string data(1000, 'x');
  EXPECT_EQ(ExtendCrc32c(Crc32c(data.substr(0, 333)), data.substr(333)),
            Crc32c(data));
}

// ---------------------------------------------------------------------------
// Journal records.

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("journal");
    path_ = dir_ + "/journal";
    absl::StatusOr<std::unique_ptr<JournalWriter>> writer =
        JournalWriter::Create(path_, FsyncPolicy::kAlways,
                              EncodeRecord(RecordType::kWorld, 0, "world"));
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int k = 0; k < 5; ++k) {
      starts_.push_back((*writer)->end());
      const std::string payload(100 + 37 * k, static_cast<char>('a' + k));
      ASSERT_TRUE(
          (*writer)
              ->Append(EncodeRecord(RecordType::kBatch, 10 + k, payload))
              .ok());
    }
    ASSERT_TRUE((*writer)->WaitDurable((*writer)->end()).ok());
    bytes_ = ReadAll(path_);
  }

  // The frames of the batches a scan of `bytes` visits.
  absl::StatusOr<JournalScan> Scan(const std::string& bytes, bool truncate,
                                   std::vector<uint64_t>* frames) {
    WriteAll(path_, bytes);
    return ScanJournal(path_, truncate, [&](const JournalRecord& record) {
      if (record.type == RecordType::kBatch) frames->push_back(record.frame);
      return absl::OkStatus();
    });
  }

  std::string dir_, path_, bytes_;
  std::vector<uint64_t> starts_;  // Where each batch record starts.
};

TEST_F(JournalTest, ReadsBackEveryRecord) {
  std::vector<uint64_t> frames;
  absl::StatusOr<JournalScan> scan = Scan(bytes_, false, &frames);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(frames, (std::vector<uint64_t>{10, 11, 12, 13, 14}));
  EXPECT_EQ(scan->valid_end, bytes_.size());
  EXPECT_TRUE(scan->dropped.empty());
}

TEST_F(JournalTest, ATornLastRecordIsDroppedAtEveryOffset) {
  const uint64_t last = starts_.back();
  for (uint64_t cut = last + 1; cut < bytes_.size(); ++cut) {
    std::vector<uint64_t> frames;
    absl::StatusOr<JournalScan> scan =
        Scan(bytes_.substr(0, cut), false, &frames);
    ASSERT_TRUE(scan.ok()) << "cut at " << cut << ": " << scan.status();
    EXPECT_EQ(frames, (std::vector<uint64_t>{10, 11, 12, 13})) << cut;
    EXPECT_EQ(scan->valid_end, last) << cut;
    EXPECT_TRUE(absl::StrContains(scan->dropped, "torn")) << scan->dropped;
    EXPECT_TRUE(absl::StrContains(scan->dropped, absl::StrCat("offset ", last)))
        << scan->dropped;
  }
}

TEST_F(JournalTest, ZerosAfterTheLastRecordAreATornTail) {
  // Space allocated but never written: the whole last record, or after it.
  std::string zeroed = bytes_;
  std::fill(zeroed.begin() + static_cast<long>(starts_.back()), zeroed.end(),
            '\0');
  std::vector<uint64_t> frames;
  absl::StatusOr<JournalScan> scan = Scan(zeroed, false, &frames);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(frames.size(), 4u);
  frames.clear();
  scan = Scan(bytes_ + std::string(4096, '\0'), false, &frames);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(frames.size(), 5u);
  EXPECT_EQ(scan->valid_end, bytes_.size());
}

TEST_F(JournalTest, CorruptionInTheMiddleRefusesUnlessTruncating) {
  // The length, the CRC, the type, the frame, the header's CRC, payload.
  for (uint64_t at : {starts_[2] + 3, starts_[2] + 5, starts_[2] + 8,
                      starts_[2] + 12, starts_[2] + 18, starts_[2] + 40}) {
    std::string flipped = bytes_;
    flipped[at] ^= 0x10;
    std::vector<uint64_t> frames;
    absl::StatusOr<JournalScan> scan = Scan(flipped, false, &frames);
    ASSERT_FALSE(scan.ok()) << "flipped at " << at;
    EXPECT_EQ(scan.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StrContains(scan.status().message(), path_));
    EXPECT_TRUE(absl::StrContains(scan.status().message(),
                                  absl::StrCat("offset ", starts_[2])))
        << scan.status();
    frames.clear();
    scan = Scan(flipped, true, &frames);
    ASSERT_TRUE(scan.ok()) << scan.status();
    EXPECT_EQ(frames, (std::vector<uint64_t>{10, 11}));
    EXPECT_EQ(scan->valid_end, starts_[2]);
    EXPECT_TRUE(absl::StartsWith(scan->dropped, "corruption"));
  }
}

TEST_F(JournalTest, AppendsGoOnAfterATornTailIsCut) {
  WriteAll(path_, bytes_.substr(0, starts_.back() + 9));
  std::vector<uint64_t> frames;
  absl::StatusOr<JournalScan> scan = Scan(ReadAll(path_), false, &frames);
  ASSERT_TRUE(scan.ok());
  absl::StatusOr<std::unique_ptr<JournalWriter>> writer =
      JournalWriter::Reopen(path_, FsyncPolicy::kNo, scan->valid_end);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(
      (*writer)->Append(EncodeRecord(RecordType::kBatch, 99, "x")).ok());
  frames.clear();
  scan = Scan(ReadAll(path_), false, &frames);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(frames, (std::vector<uint64_t>{10, 11, 12, 13, 99}));
}

// ---------------------------------------------------------------------------
// Snapshot files.

TEST(SnapshotFileTest, RoundTripAndEveryKindOfDamage) {
  const std::string dir = FreshDir("snapshot");
  World world;
  testing::RandomBatches random(5, 1);
  for (int k = 0; k < 30; ++k) random.Next(world, 10);
  WorldImage image;
  world.CopyImage(&image);
  const std::string path = dir + "/snapshot";
  ASSERT_TRUE(WriteSnapshotFile(path, "info", image).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::string info;
  WorldImage back;
  ASSERT_TRUE(ReadSnapshotFile(path, &info, &back).ok());
  EXPECT_EQ(info, "info");
  EXPECT_EQ(back.entity, image.entity);
  EXPECT_EQ(back.parent, image.parent);
  EXPECT_EQ(back.frame, image.frame);
  EXPECT_EQ(std::memcmp(back.rotation.data(), image.rotation.data(),
                        image.size() * sizeof(glm::quat)),
            0);
  const std::string bytes = ReadAll(path);
  for (size_t at = 0; at < bytes.size(); at += 7) {
    std::string flipped = bytes;
    flipped[at] ^= 0x01;
    WriteAll(path, flipped);
    const absl::Status read = ReadSnapshotFile(path, &info, &back);
    EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << "byte " << at;
  }
  WriteAll(path, bytes.substr(0, bytes.size() - 1));
  EXPECT_EQ(ReadSnapshotFile(path, &info, &back).code(),
            absl::StatusCode::kDataLoss);
}

// The same format in memory (a snapshot in JetStream): byte for byte the
// file's, and every damage or truncation DataLoss, never a crash.
TEST(SnapshotFileTest, InMemoryIsTheFilesBytesAndRefusesDamage) {
  const std::string dir = FreshDir("snapshot_bytes");
  World world;
  testing::RandomBatches random(6, 1);
  for (int k = 0; k < 30; ++k) random.Next(world, 10);
  WorldImage image;
  world.CopyImage(&image);
  const std::string path = dir + "/snapshot";
  ASSERT_TRUE(WriteSnapshotFile(path, "info", image).ok());
  const std::string bytes = EncodeSnapshot("info", image);
  EXPECT_EQ(bytes, ReadAll(path));
  std::string info;
  WorldImage back;
  ASSERT_TRUE(DecodeSnapshot(bytes, "test", &info, &back).ok());
  EXPECT_EQ(info, "info");
  EXPECT_EQ(back.entity, image.entity);
  EXPECT_EQ(back.parent, image.parent);
  for (size_t at = 0; at < bytes.size(); at += 5) {
    std::string flipped = bytes;
    flipped[at] ^= 0x10;
    EXPECT_EQ(DecodeSnapshot(flipped, "test", &info, &back).code(),
              absl::StatusCode::kDataLoss)
        << "byte " << at;
  }
  for (size_t size : {size_t{0}, size_t{8}, size_t{20}, bytes.size() - 1}) {
    EXPECT_EQ(
        DecodeSnapshot(bytes.substr(0, size), "test", &info, &back).code(),
        absl::StatusCode::kDataLoss)
        << size << " bytes";
  }
  WorldImage empty;
  ASSERT_TRUE(
      DecodeSnapshot(EncodeSnapshot("", empty), "empty", &info, &back).ok());
  EXPECT_EQ(back.size(), 0u);
}

// ---------------------------------------------------------------------------
// A WorldHost over a data directory.

v1::ApplyRequest Request(const std::string& world,
                         const std::vector<Command>& batch) {
  v1::ApplyRequest request;
  request.set_world(world);
  v1::AppendCommands(batch, &request);
  return request;
}

// Whether `world` in `host` is `model`, bit for bit.
void ExpectHolds(WorldHost& host, const std::string& name, const World& model) {
  absl::StatusOr<std::shared_ptr<HostedWorld>> world = host.Get(name);
  ASSERT_TRUE(world.ok()) << world.status();
  ASSERT_EQ((*world)->Info().entities(), model.size());
  v1::ReadRequest read;
  read.set_world(name);
  model.ForEach(
      [&](EntityId e, EntityId, const Matrix3x4&) { read.add_entity(e); });
  v1::ReadResponse response;
  ASSERT_TRUE((*world)->Read(read, host.limits(), &response).ok());
  absl::StatusOr<std::vector<EntityState>> states =
      v1::EntityStatesFromWire(response);
  ASSERT_TRUE(states.ok());
  for (const EntityState& got : *states) {
    const Transform local = *model.Local(got.entity);
    const Matrix3x4 matrix = *model.WorldMatrix(got.entity);
    EXPECT_EQ(got.parent, *model.Parent(got.entity)) << got.entity;
    EXPECT_EQ(std::memcmp(&got.local, &local, sizeof local), 0) << got.entity;
    EXPECT_EQ(std::memcmp(&got.world, &matrix, sizeof matrix), 0) << got.entity;
  }
}

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override { options_.data_dir = FreshDir("host"); }

  std::unique_ptr<WorldHost> Start() {
    absl::StatusOr<std::unique_ptr<Storage>> storage = Storage::Open(options_);
    EXPECT_TRUE(storage.ok()) << storage.status();
    if (!storage.ok()) return nullptr;
    auto host = std::make_unique<WorldHost>(Limits{}, 60, *std::move(storage));
    recovered_ = host->Recover();
    return host;
  }

  // Creates `name` (driven) and writes `batches` random batches to it.
  void Write(WorldHost& host, const std::string& name, int batches) {
    if (!host.Get(name).ok()) {
      v1::CreateWorldRequest create;
      create.set_name(name);
      create.set_mode(v1::FRAME_MODE_DRIVEN);
      ASSERT_TRUE(host.Create(create).ok());
    }
    std::shared_ptr<HostedWorld> world = *host.Get(name);
    for (int k = 0; k < batches; ++k) {
      v1::ApplyRequest request = Request(name, random_.Next(model_, 10));
      request.set_end_frame(k % 3 == 0);
      absl::StatusOr<uint64_t> frame = world->Apply(request, host.limits());
      ASSERT_TRUE(frame.ok()) << frame.status();
      last_frame_ = *frame;
    }
  }

  std::vector<std::string> Files(const std::string& name) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(
             absl::StrCat(options_.data_dir, "/worlds/w_", name))) {
      files.push_back(entry.path().filename().string());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  StorageOptions options_;
  absl::Status recovered_;
  testing::RandomBatches random_{11, 1};
  World model_;
  uint64_t last_frame_ = 0;
};

TEST_F(StorageTest, ReplaysTheJournalAfterTheSnapshot) {
  {
    std::unique_ptr<WorldHost> host = Start();
    ASSERT_TRUE(recovered_.ok());
    Write(*host, "w", 40);
    ASSERT_TRUE((*host->Get("w"))->SaveSnapshot().ok());
    // One snapshot and the journal since it: nothing older is kept.
    EXPECT_EQ(Files("w"),
              (std::vector<std::string>{"journal-0000000000000001",
                                        "snapshot-0000000000000001"}));
    Write(*host, "w", 40);
  }  // Gone without a snapshot of its own, as after kill -9.
  std::unique_ptr<WorldHost> host = Start();
  ASSERT_TRUE(recovered_.ok()) << recovered_;
  ExpectHolds(*host, "w", model_);
  std::shared_ptr<HostedWorld> world = *host->Get("w");
  EXPECT_EQ(world->Info().frame(), last_frame_);
  EXPECT_EQ(world->mode(), v1::FRAME_MODE_DRIVEN);
  // Frames go on from the last one journaled.
  absl::StatusOr<uint64_t> frame =
      world->Apply(Request("w", random_.Next(model_, 3)), host->limits());
  ASSERT_TRUE(frame.ok());
  EXPECT_GT(*frame, last_frame_);
}

TEST_F(StorageTest, DeletedWorldsStayDeleted) {
  {
    std::unique_ptr<WorldHost> host = Start();
    Write(*host, "gone", 5);
    model_ = World();  // Each world its own model.
    random_ = testing::RandomBatches(12, 1);
    Write(*host, "kept", 5);
    ASSERT_TRUE(host->Delete("gone").ok());
  }
  std::unique_ptr<WorldHost> host = Start();
  ASSERT_TRUE(recovered_.ok());
  EXPECT_FALSE(host->Get("gone").ok());
  EXPECT_TRUE(host->Get("kept").ok());
}

TEST_F(StorageTest, ACorruptJournalRefusesToStartUnlessTruncating) {
  {
    std::unique_ptr<WorldHost> host = Start();
    Write(*host, "w", 30);
  }
  const std::string journal =
      absl::StrCat(options_.data_dir, "/worlds/w_w/journal-0000000000000000");
  std::string bytes = ReadAll(journal);
  bytes[bytes.size() / 2] ^= 0x40;
  WriteAll(journal, bytes);
  {
    std::unique_ptr<WorldHost> host = Start();
    EXPECT_EQ(recovered_.code(), absl::StatusCode::kDataLoss) << recovered_;
    EXPECT_TRUE(absl::StrContains(recovered_.message(), journal));
    EXPECT_TRUE(absl::StrContains(recovered_.message(), "offset"));
  }
  options_.truncate_corrupt = true;
  std::unique_ptr<WorldHost> host = Start();
  ASSERT_TRUE(recovered_.ok()) << recovered_;
  absl::StatusOr<std::shared_ptr<HostedWorld>> world = host->Get("w");
  ASSERT_TRUE(world.ok());
  EXPECT_LT((*world)->Info().entities(), model_.size() + 1);
}

TEST_F(StorageTest, ASecondServerOnTheDirectoryIsRefused) {
  absl::StatusOr<std::unique_ptr<Storage>> first = Storage::Open(options_);
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<Storage>> second = Storage::Open(options_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StorageTest, AFullDiskRefusesWritesWithUnavailableUntilSpaceReturns) {
  // A 2 MB file system of its own, so that filling it harms nothing else.
  const std::string mount_point = FreshDir("tmpfs");
  if (mount("xform-test", mount_point.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "): the ENOSPC path is not tested";
  }
  struct Unmount {
    std::string at;
    ~Unmount() { umount2(at.c_str(), MNT_DETACH); }
  } unmount{mount_point};
  options_.data_dir = mount_point + "/data";
  std::unique_ptr<WorldHost> host = Start();
  ASSERT_TRUE(recovered_.ok());
  Write(*host, "w", 10);
  // Fill the disk.
  const std::string filler = mount_point + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(4096, 'f');
    while (out.write(block.data(), block.size())) {
    }
  }
  std::shared_ptr<HostedWorld> world = *host->Get("w");
  const uint64_t frame_before = world->Info().frame();
  World refused_model = model_;
  absl::StatusOr<uint64_t> refused = world->Apply(
      Request("w", random_.Next(refused_model, 400)), host->limits());
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "disk is full"))
      << refused.status();
  ExpectHolds(*host, "w", model_);  // Nothing of it applied.
  EXPECT_EQ(world->Info().frame(), frame_before);
  random_.Adopt(model_);
  // Space returns: writes go on, and what they wrote survives a restart.
  fs::remove(filler);
  Write(*host, "w", 10);
  host.reset();
  host = Start();
  ASSERT_TRUE(recovered_.ok()) << recovered_;
  ExpectHolds(*host, "w", model_);
}

}  // namespace
}  // namespace xform::server
