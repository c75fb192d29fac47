// Copyright 2026 The xform Authors.

#include "xform/region.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace xform {
namespace {

bool Finite(glm::vec3 v) {
  return std::isfinite(v.x) && std::isfinite(v.y) && std::isfinite(v.z);
}

absl::Status CheckMargin(float margin) {
  if (!std::isfinite(margin) || margin < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a region's margin must be finite and not negative, not ", margin));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Region> Region::Box(glm::vec3 min, glm::vec3 max, float margin) {
  if (!Finite(min) || !Finite(max)) {
    return absl::InvalidArgumentError("a box's corners must be finite");
  }
  if (min.x > max.x || min.y > max.y || min.z > max.z) {
    return absl::InvalidArgumentError(
        absl::StrCat("a box is inverted: its min (", min.x, ", ", min.y, ", ",
                     min.z, ") exceeds its max (", max.x, ", ", max.y, ", ",
                     max.z, ") on an axis"));
  }
  if (absl::Status status = CheckMargin(margin); !status.ok()) return status;
  return Region(Shape::kBox, min, max, 0, margin);
}

absl::StatusOr<Region> Region::Sphere(glm::vec3 center, float radius,
                                      float margin) {
  if (!Finite(center)) {
    return absl::InvalidArgumentError("a sphere's center must be finite");
  }
  if (!std::isfinite(radius) || radius < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sphere's radius must be finite and not negative, not ", radius));
  }
  if (absl::Status status = CheckMargin(margin); !status.ok()) return status;
  return Region(Shape::kSphere, center, center, radius, margin);
}

absl::StatusOr<Region> Region::Parse(absl::string_view text) {
  const bool box = absl::StartsWith(text, "box:");
  if (!box && !absl::StartsWith(text, "sphere:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a region is box:x0,y0,z0,x1,y1,z1 or sphere:x,y,z,r (optionally "
        "with ,margin=M), not '",
        text, "'"));
  }
  text.remove_prefix(box ? 4 : 7);
  float margin = 0;
  std::vector<float> numbers;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const bool is_margin = absl::ConsumePrefix(&part, "margin=");
    float value;
    if (!absl::SimpleAtof(part, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' in a region is not a number"));
    }
    if (is_margin) {
      margin = value;
    } else {
      numbers.push_back(value);
    }
  }
  const size_t wanted = box ? 6 : 4;
  if (numbers.size() != wanted) {
    return absl::InvalidArgumentError(
        absl::StrCat(box ? "a box" : "a sphere", " takes ", wanted,
                     " numbers, not ", numbers.size()));
  }
  if (box) {
    return Box({numbers[0], numbers[1], numbers[2]},
               {numbers[3], numbers[4], numbers[5]}, margin);
  }
  return Sphere({numbers[0], numbers[1], numbers[2]}, numbers[3], margin);
}

void Region::GrownBounds(glm::vec3* min, glm::vec3* max) const {
  const glm::vec3 grow(shape_ == Shape::kBox ? margin_ : radius_ + margin_);
  *min = min_ - grow;
  *max = max_ + grow;
}

std::string Region::ToString() const {
  const std::string margin =
      margin_ > 0 ? absl::StrCat(",margin=", margin_) : "";
  if (shape_ == Shape::kBox) {
    return absl::StrCat("box:", min_.x, ",", min_.y, ",", min_.z, ",", max_.x,
                        ",", max_.y, ",", max_.z, margin);
  }
  return absl::StrCat("sphere:", min_.x, ",", min_.y, ",", min_.z, ",", radius_,
                      margin);
}

bool Region::Within(glm::vec3 p, float grown) const {
  if (shape_ == Shape::kBox) {
    return p.x >= min_.x - grown && p.x <= max_.x + grown &&
           p.y >= min_.y - grown && p.y <= max_.y + grown &&
           p.z >= min_.z - grown && p.z <= max_.z + grown;
  }
  const glm::vec3 d = p - min_;
  const float reach = radius_ + grown;
  return d.x * d.x + d.y * d.y + d.z * d.z <= reach * reach;
}

}  // namespace xform
