// Copyright 2026 The xform Authors.
//
// WorldNames: a batch's names checked in command order against the world
// before it, taken back with a refused batch, freed by destroys.

#include "server/host/world_names.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "xform/v1/wire.h"

namespace xform::server {
namespace {

v1::Command Create(std::vector<EntityId> ids, std::vector<std::string> names,
                   EntityId parent = kNoEntity) {
  v1::Command c;
  for (size_t i = 0; i < ids.size(); ++i) {
    c.mutable_create()->add_entity(ids[i]);
    c.mutable_create()->add_parent(parent);
    c.mutable_create()->add_name(names[i]);
  }
  return c;
}

v1::Command Rename(EntityId e, std::string name) {
  v1::Command c;
  c.mutable_rename()->add_entity(e);
  c.mutable_rename()->add_name(std::move(name));
  return c;
}

v1::Command Destroy(EntityId e, bool keep_children = false) {
  v1::Command c;
  c.mutable_destroy()->add_entity(e);
  c.mutable_destroy()->set_keep_children(keep_children);
  return c;
}

// Applies `commands` to the world and the names, as HostedWorld does.
absl::Status Apply(World& world, WorldNames& names,
                   std::vector<v1::Command> commands) {
  v1::ApplyRequest request;
  for (v1::Command& c : commands) *request.add_commands() = std::move(c);
  absl::StatusOr<WorldNames::Prepared> prepared =
      names.Prepare(request, world, 32);
  if (!prepared.ok()) return prepared.status();
  absl::StatusOr<std::vector<Command>> core = v1::ToCommands(request, 1000);
  if (!core.ok()) return core.status();
  if (absl::Status s = world.Apply(*core); !s.ok()) return s;
  names.Commit(*prepared, world);
  return absl::OkStatus();
}

TEST(WorldNamesTest, NamesAreUniqueAndResolve) {
  World world;
  WorldNames names;
  ASSERT_TRUE(Apply(world, names, {Create({1, 2}, {"base_link", ""})}).ok());
  EXPECT_EQ(*names.Resolve("base_link"), 1u);
  EXPECT_EQ(*names.Resolve("e2"), 2u);
  EXPECT_EQ(*names.Resolve("world"), kNoEntity);
  EXPECT_EQ(names.Resolve("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Apply(world, names, {Rename(2, "base_link")}).code(),
            absl::StatusCode::kAlreadyExists);
  // A rename to one's own name, and swapping through a free name.
  EXPECT_TRUE(Apply(world, names, {Rename(1, "base_link")}).ok());
  ASSERT_TRUE(Apply(world, names,
                    {Rename(1, "tmp"), Rename(2, "base_link"), Rename(1, "b")})
                  .ok());
  EXPECT_EQ(*names.Resolve("base_link"), 2u);
  EXPECT_EQ(names.NameOf(1), "b");
  EXPECT_EQ(names.Resolve("tmp").status().code(), absl::StatusCode::kNotFound);
}

TEST(WorldNamesTest, ARefusedBatchChangesNoName) {
  World world;
  WorldNames names;
  ASSERT_TRUE(Apply(world, names, {Create({1}, {"a"})}).ok());
  // The rename checks out; the create of an entity that exists does not.
  EXPECT_FALSE(Apply(world, names, {Rename(1, "b"), Create({1}, {"c"})}).ok());
  EXPECT_EQ(names.NameOf(1), "a");
  EXPECT_EQ(names.size(), 1u);
}

TEST(WorldNamesTest, DestroysFreeNames) {
  World world;
  WorldNames names;
  ASSERT_TRUE(Apply(world, names,
                    {Create({1}, {"root"}), Create({2}, {"child"}, 1),
                     Create({3}, {"grandchild"}, 2)})
                  .ok());
  // The destroyed entity's own name is free for the rest of its batch.
  ASSERT_TRUE(
      Apply(world, names, {Destroy(3), Create({4}, {"grandchild"})}).ok());
  EXPECT_EQ(*names.Resolve("grandchild"), 4u);
  // A subtree's names go when the batch commits.
  ASSERT_TRUE(Apply(world, names, {Destroy(1)}).ok());
  EXPECT_EQ(names.Resolve("child").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(names.size(), 1u);  // grandchild (4), a root.
  EXPECT_EQ(Apply(world, names, {Rename(2, "x")}).code(),
            absl::StatusCode::kNotFound);
}

TEST(WorldNamesTest, NamesThatAreFramesAlreadyAreRefused) {
  for (const char* bad : {"world", "e7", "e0123", "tab\there",
                          "a-name-longer-than-thirty-two-bytes"}) {
    EXPECT_EQ(WorldNames::CheckName(bad, 32).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  for (const char* good : {"base_link", "e", "e1x", "camera/optical", "é"}) {
    EXPECT_TRUE(WorldNames::CheckName(good, 32).ok()) << good;
  }
}

}  // namespace
}  // namespace xform::server
