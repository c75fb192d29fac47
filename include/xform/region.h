// Copyright 2026 The xform Authors.
//
// Region: a part of world space that a subscription's view may be limited
// to, and the rule that says which entities it holds.
//
// An entity's position is the translation of its world matrix. A region is
// an axis-aligned box or a sphere, with a margin for hysteresis: an entity
// enters the view when its position is inside the region, and leaves it
// only when its position is outside the region grown by the margin (a box
// by the margin on every side, a sphere's radius by it). So an
// entity moving back and forth across the border by less than the margin
// does not flicker in and out of the view (Holds).
//
// Regions come from users (a flag, a request), so they are made by Box,
// Sphere or Parse, which refuse what has no meaning: a non-finite number,
// an inverted box, a negative radius or margin. Each refusal is
// INVALID_ARGUMENT naming what was wrong; a Region that exists is valid.
//
// Costs: every call O(1). Thread-compatible (a value type).

#ifndef XFORM_REGION_H_
#define XFORM_REGION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "glm/vec3.hpp"

namespace xform {

class Region {
 public:
  enum class Shape { kBox, kSphere };

  // The box from `min` to `max` (each component of min <= max's).
  static absl::StatusOr<Region> Box(glm::vec3 min, glm::vec3 max,
                                    float margin = 0);
  // The ball around `center` of `radius` (>= 0).
  static absl::StatusOr<Region> Sphere(glm::vec3 center, float radius,
                                       float margin = 0);
  // "box:x0,y0,z0,x1,y1,z1" or "sphere:x,y,z,r", each optionally followed by
  // ",margin=M": what xformctl and xform-load take.
  static absl::StatusOr<Region> Parse(absl::string_view text);

  Shape shape() const { return shape_; }
  float margin() const { return margin_; }
  // For a box, its corners; for a sphere, its center (both) and radius.
  glm::vec3 min() const { return min_; }
  glm::vec3 max() const { return max_; }
  glm::vec3 center() const { return min_; }
  float radius() const { return radius_; }

  // The same region moved by `offset` (finite, and small enough that the
  // corners stay finite): a camera's view, say.
  Region Translated(glm::vec3 offset) const {
    return Region(shape_, min_ + offset, max_ + offset, radius_, margin_);
  }

  // Whether `position` is inside the region (borders included).
  bool Inside(glm::vec3 position) const { return Within(position, 0); }
  // Whether `position` is inside the region grown by the margin.
  bool InsideGrown(glm::vec3 position) const {
    return Within(position, margin_);
  }
  // The membership rule: whether an entity at `position` is in the view,
  // given whether it was before this frame.
  bool Holds(bool was_in, glm::vec3 position) const {
    return was_in ? InsideGrown(position) : Inside(position);
  }
  // The axis-aligned box around the region grown by the margin: every
  // position the view may hold is inside it.
  void GrownBounds(glm::vec3* min, glm::vec3* max) const;

  // As Parse reads it (numbers to six significant digits: for people).
  std::string ToString() const;

  friend bool operator==(const Region&, const Region&) = default;

 private:
  Region(Shape shape, glm::vec3 min, glm::vec3 max, float radius, float margin)
      : shape_(shape), min_(min), max_(max), radius_(radius), margin_(margin) {}
  bool Within(glm::vec3 position, float grown) const;

  Shape shape_;
  glm::vec3 min_;  // A sphere's center.
  glm::vec3 max_;  // Unused for a sphere (its center again).
  float radius_;   // 0 for a box.
  float margin_;
};

}  // namespace xform

#endif  // XFORM_REGION_H_
