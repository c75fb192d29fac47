// Copyright 2026 The xform Authors.

#include "server/demo.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "glm/gtc/quaternion.hpp"
#include "server/base/log.h"
#include "xform/v1/wire.h"
#include "xform/world.h"

namespace xform::server {
namespace {

// One self-driving world: `build` makes its entities once, then `step`
// writes the commands of tick k every 1/hz seconds until `stop`.
struct DemoWorld {
  std::string name;
  double hz = 30;
  std::function<std::vector<Command>()> build;
  std::function<void(uint64_t tick, std::vector<Command>* commands)> step;
  std::string description;
};

void Drive(WorldHost& host, const DemoWorld& demo,
           const absl::Notification& stop) {
  v1::CreateWorldRequest create_world;
  create_world.set_name(demo.name);
  create_world.set_mode(v1::FRAME_MODE_TICK);
  create_world.set_tick_hz(demo.hz);
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host.Create(create_world);
  if (absl::IsAlreadyExists(world.status())) {
    // Recovered from --data_dir: the demo starts afresh.
    host.Delete(demo.name).IgnoreError();
    world = host.Create(create_world);
  }
  if (!world.ok()) {
    Log('E', "demo ", demo.name, ": ", world.status().ToString());
    return;
  }
  const auto apply = [&](absl::Span<const Command> batch) {
    v1::ApplyRequest request;
    request.set_world(demo.name);
    v1::AppendCommands(batch, &request);
    absl::StatusOr<uint64_t> frame = (*world)->Apply(request, host.limits());
    if (!frame.ok()) {
      Log('E', "demo ", demo.name, ": ", frame.status().ToString());
    }
    return frame.ok();
  };
  // In parts, each within the default write limits (--max_batch,
  // --max_commands), however large the world.
  const std::vector<Command> scene = demo.build();
  constexpr size_t kPart = 50'000;
  for (size_t at = 0; at < scene.size(); at += kPart) {
    if (!apply(absl::MakeConstSpan(scene).subspan(at, kPart))) return;
  }
  Log('I', "demo: world '", demo.name, "': ", demo.description);
  std::vector<Command> commands;
  const absl::Duration period = absl::Seconds(1 / demo.hz);
  for (uint64_t tick = 0; !stop.WaitForNotificationWithTimeout(period);
       ++tick) {
    commands.clear();
    demo.step(tick, &commands);
    if (!apply(commands)) return;
  }
}

// 100 trees of 100 entities, each entity under a random earlier one of its
// tree; each tick turns the roots of 10 trees.
DemoWorld SceneDemo() {
  DemoWorld demo{.name = "demo", .hz = 30};
  demo.description =
      "10000 entities in 100 trees; moving 10 trees per tick, 30 Hz";
  demo.build = [] {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<Command> scene;
    for (EntityId tree = 0; tree < 100; ++tree) {
      for (EntityId k = 0; k < 100; ++k) {
        CreateOp create;
        create.entity = tree * 100 + k + 1;
        if (k > 0) {
          create.parent =
              tree * 100 + 1 +
              std::uniform_int_distribution<EntityId>(0, k - 1)(rng);
        }
        create.local.position = {10 * u(rng), 10 * u(rng), 10 * u(rng)};
        scene.emplace_back(create);
      }
    }
    return scene;
  };
  demo.step = [](uint64_t tick, std::vector<Command>* move) {
    const float angle = 0.05f * static_cast<float>(tick);
    for (EntityId tree = tick % 10; tree < 100; tree += 10) {
      SetLocalOp set;
      set.entity = tree * 100 + 1;
      set.local.position = {static_cast<float>(tree), 0, 0};
      set.local.rotation = glm::angleAxis(angle, glm::vec3(0, 1, 0));
      move->emplace_back(set);
    }
  };
  return demo;
}

// The solar system's ids.
constexpr EntityId kSystem = 1;  // The root, at the origin.
constexpr EntityId kSun = 2;
constexpr EntityId kBelt = 3;         // The asteroid belt's pivot.
constexpr EntityId kOrbit = 10;       // + planet: its orbit pivot.
constexpr EntityId kPlanet = 20;      // + planet.
constexpr EntityId kMoonOrbit = 100;  // + 10 planet + moon.
constexpr EntityId kMoon = 200;       // + 10 planet + moon.
constexpr EntityId kAsteroid = 1000;  // + asteroid.
constexpr int kAsteroids = 3000;

struct Planet {
  float radius, scale;
  int moons;
};
constexpr Planet kPlanets[] = {{8, 0.6f, 0},  {12, 1.0f, 0}, {17, 1.1f, 1},
                               {23, 0.8f, 2}, {44, 2.6f, 4}, {56, 2.2f, 3},
                               {68, 1.6f, 2}, {80, 1.5f, 3}};

glm::quat Turn(float angle, glm::vec3 axis = {0, 1, 0}) {
  return glm::angleAxis(angle, glm::normalize(axis));
}

// The solar system at rest: pivots (orbits) under the system, each body on
// its pivot, and a belt of asteroids.
std::vector<Command> SolarScene() {
  std::vector<Command> scene;
  const auto create = [&](EntityId e, EntityId parent, glm::vec3 position,
                          float scale) {
    CreateOp op;
    op.entity = e;
    op.parent = parent;
    op.local.position = position;
    op.local.scale = glm::vec3(scale);
    scene.emplace_back(op);
  };
  create(kSystem, kNoEntity, {0, 0, 0}, 1);
  create(kSun, kSystem, {0, 0, 0}, 5);
  for (EntityId p = 0; p < std::size(kPlanets); ++p) {
    const Planet& planet = kPlanets[p];
    create(kOrbit + p, kSystem, {0, 0, 0}, 1);
    create(kPlanet + p, kOrbit + p, {planet.radius, 0, 0}, planet.scale);
    for (EntityId m = 0; m < static_cast<EntityId>(planet.moons); ++m) {
      create(kMoonOrbit + 10 * p + m, kPlanet + p, {0, 0, 0}, 1);
      create(kMoon + 10 * p + m, kMoonOrbit + 10 * p + m,
             {1.4f + 0.7f * static_cast<float>(m), 0, 0}, 0.3f);
    }
  }
  create(kBelt, kSystem, {0, 0, 0}, 1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> angle(0, 2 * std::numbers::pi_v<float>);
  std::uniform_real_distribution<float> radius(29, 36);
  std::uniform_real_distribution<float> height(-0.8f, 0.8f);
  std::uniform_real_distribution<float> size(0.1f, 0.35f);
  for (int a = 0; a < kAsteroids; ++a) {
    const float theta = angle(rng), r = radius(rng);
    create(kAsteroid + a, kBelt,
           {r * std::cos(theta), height(rng), r * std::sin(theta)}, size(rng));
  }
  return scene;
}

// Tick `tick`'s motions: every pivot turns, and its children follow.
void SolarStep(uint64_t tick, std::vector<Command>* move) {
  const float t = static_cast<float>(tick) / 60;
  const auto turn = [&](EntityId e, glm::quat rotation,
                        glm::vec3 position = {0, 0, 0}, float scale = 1) {
    SetLocalOp op;
    op.entity = e;
    op.local.position = position;
    op.local.rotation = rotation;
    op.local.scale = glm::vec3(scale);
    move->emplace_back(op);
  };
  turn(kSun, Turn(0.2f * t), {0, 0, 0}, 5);
  turn(kBelt, Turn(0.04f * t));
  for (EntityId p = 0; p < std::size(kPlanets); ++p) {
    const Planet& planet = kPlanets[p];
    // Kepler-ish: the outer planets are slower.
    const float year = 3 / std::sqrt(planet.radius);
    turn(kOrbit + p, Turn(year * t + static_cast<float>(p),
                          {0.03f * static_cast<float>(p), 1, 0}));
    turn(kPlanet + p, Turn(1.5f * t), {planet.radius, 0, 0}, planet.scale);
    for (EntityId m = 0; m < static_cast<EntityId>(planet.moons); ++m) {
      turn(kMoonOrbit + 10 * p + m,
           Turn((2.5f - 0.4f * static_cast<float>(m)) * t +
                    static_cast<float>(m),
                {0.2f * static_cast<float>(m), 1, 0}));
    }
  }
}

DemoWorld SolarDemo() {
  DemoWorld demo{.name = "solar", .hz = 60};
  demo.description =
      "a sun, 8 planets, 15 moons and 3000 asteroids; every motion is a "
      "pivot's, which its children follow, 60 Hz";
  demo.build = SolarScene;
  demo.step = SolarStep;
  return demo;
}

// The city's layout: 20 x 20 blocks of 50 m over [-500, 500] on the ground
// (y up), streets 14 m wide between them.
constexpr int kBlocksPerSide = 20;
constexpr float kBlock = 50;
constexpr float kHalfCity = kBlocksPerSide * kBlock / 2;
constexpr int kBuildingsPerBlock = 9;  // 3 x 3 lots.
constexpr EntityId kFirstBuilding = kBlocksPerSide * kBlocksPerSide + 1;
constexpr EntityId kFirstDrone =
    kFirstBuilding + kBlocksPerSide * kBlocksPerSide * kBuildingsPerBlock;
// At most this many drones fly (the rest hover): 10,000 moves a frame, the
// load of the region benchmark's city.
constexpr EntityId kMaxFlying = 10'000;

// A flying drone: along a street's corridor (x or z), at a height, to and
// fro at a speed; where it is at time t.
struct Flight {
  bool along_x;
  float lane;  // The corridor's other coordinate.
  float height, start, speed;

  glm::vec3 At(float t) const {
    // Across the city and back: a triangle wave over [-half, half].
    const float period = 4 * kHalfCity;
    float s = std::fmod(start + speed * t, period);
    if (s < 0) s += period;
    const float along = s < 2 * kHalfCity ? s - kHalfCity : 3 * kHalfCity - s;
    return along_x ? glm::vec3(along, height, lane)
                   : glm::vec3(lane, height, along);
  }
  glm::quat Heading(float t) const {
    const float period = 4 * kHalfCity;
    float s = std::fmod(start + speed * t, period);
    if (s < 0) s += period;
    const bool back = s >= 2 * kHalfCity;
    const float yaw = (along_x ? 0.0f : std::numbers::pi_v<float> / 2) +
                      (back ? std::numbers::pi_v<float> : 0.0f);
    return glm::angleAxis(yaw, glm::vec3(0, 1, 0));
  }
};

std::vector<Flight> CityFlights(EntityId drones) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> street(0, kBlocksPerSide);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<Flight> flights(std::min(drones, kMaxFlying));
  for (Flight& f : flights) {
    f.along_x = u(rng) < 0.5f;
    f.lane = static_cast<float>(street(rng)) * kBlock - kHalfCity +
             (u(rng) - 0.5f) * 10;
    f.height = 6 + 60 * u(rng);
    f.start = 4 * kHalfCity * u(rng);
    f.speed = 5 + 15 * u(rng);
  }
  return flights;
}

// The city at rest: the blocks (roots at their centres), each with its
// buildings as children, then `drones` drones, the first flights.size()
// where their flights start, the others hovering.
std::vector<Command> CityScene(EntityId drones,
                               const std::vector<Flight>& flights) {
  std::vector<Command> scene;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0, 1);
  const auto create = [&](EntityId e, EntityId parent, glm::vec3 position,
                          glm::vec3 scale) {
    CreateOp op;
    op.entity = e;
    op.parent = parent;
    op.local.position = position;
    op.local.scale = scale;
    scene.emplace_back(op);
  };
  for (int bx = 0; bx < kBlocksPerSide; ++bx) {
    for (int bz = 0; bz < kBlocksPerSide; ++bz) {
      const EntityId block = static_cast<EntityId>(bx) * kBlocksPerSide +
                             static_cast<EntityId>(bz) + 1;
      create(block, kNoEntity,
             {(static_cast<float>(bx) + 0.5f) * kBlock - kHalfCity, 0,
              (static_cast<float>(bz) + 0.5f) * kBlock - kHalfCity},
             glm::vec3(1));
      for (int lot = 0; lot < kBuildingsPerBlock; ++lot) {
        const float height = 8 + 52 * u(rng) * u(rng);
        const float width = 8 + 3 * u(rng);
        const int column = lot % 3 - 1;
        const int row = lot / 3 - 1;
        create(kFirstBuilding + (block - 1) * kBuildingsPerBlock +
                   static_cast<EntityId>(lot),
               block,
               {12.0f * static_cast<float>(column), height / 2,
                12.0f * static_cast<float>(row)},
               {width, height, width});
      }
    }
  }
  for (EntityId d = 0; d < drones; ++d) {
    const glm::vec3 at =
        d < flights.size()
            ? flights[d].At(0)
            : glm::vec3((u(rng) - 0.5f) * 2 * kHalfCity, 3 + 117 * u(rng),
                        (u(rng) - 0.5f) * 2 * kHalfCity);
    create(kFirstDrone + d, kNoEntity, at, {1.2f, 0.4f, 1.2f});
  }
  return scene;
}

// Tick `tick`'s moves: every flying drone where its flight has it.
void CityStep(const std::vector<Flight>& flights, uint64_t tick,
              std::vector<Command>* move) {
  const float t = static_cast<float>(tick) / 30;
  for (size_t d = 0; d < flights.size(); ++d) {
    const Flight& flight = flights[d];
    SetLocalOp op;
    op.entity = kFirstDrone + d;
    op.local.position = flight.At(t);
    op.local.rotation = flight.Heading(t);
    op.local.scale = {1.2f, 0.4f, 1.2f};
    move->emplace_back(op);
  }
}

// `entities` in all: 400 blocks (roots at their centres), each with 9
// buildings as children, and drones (roots) for the rest: a fiftieth of
// them, up to 10,000, fly the streets' corridors at 5-20 m/s; the others
// hover over the city, still, up to 120 m high.
DemoWorld CityDemo(EntityId entities) {
  DemoWorld demo{.name = "city", .hz = 30};
  const EntityId drones =
      entities >= kFirstDrone ? entities - kFirstDrone + 1 : 0;
  const auto flights =
      std::make_shared<const std::vector<Flight>>(CityFlights(drones / 50));
  demo.description =
      absl::StrCat(kFirstDrone - 1, " blocks and buildings and ", drones,
                   " drones over ", 2 * kHalfCity, " m x ", 2 * kHalfCity,
                   " m; ", flights->size(), " drones fly, 30 Hz");
  demo.build = [drones, flights] { return CityScene(drones, *flights); };
  demo.step = [flights](uint64_t tick, std::vector<Command>* move) {
    CityStep(*flights, tick, move);
  };
  return demo;
}

}  // namespace

void RunDemoWorlds(WorldHost& host, uint64_t city_entities,
                   const absl::Notification& stop) {
  std::thread solar([&] { Drive(host, SolarDemo(), stop); });
  std::thread city;
  if (city_entities > 0) {
    city = std::thread([&] { Drive(host, CityDemo(city_entities), stop); });
  }
  Drive(host, SceneDemo(), stop);
  solar.join();
  if (city.joinable()) city.join();
}

DemoWorlds::DemoWorlds(WorldHost& host, bool enabled, uint64_t city_entities) {
  if (enabled) {
    thread_ = std::thread([this, &host, city_entities] {
      RunDemoWorlds(host, city_entities, stop_);
    });
  }
}

void DemoWorlds::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
}

}  // namespace xform::server
