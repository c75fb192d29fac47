// Copyright 2026 The xform Authors.
//
// Built as C++17: see tf2_oracle.h.

#include "tests/tf2_oracle.h"

#include <functional>

#include "geometry_msgs/TransformStamped.h"
#include "tf2/buffer_core.h"
#include "tf2/exceptions.h"

namespace xform {
namespace {

ros::Time RosTime(int64_t stamp_nanos) {
  ros::Time time;
  time.fromNSec(static_cast<uint64_t>(stamp_nanos));
  return time;
}

Tf2Answer Ask(const std::function<geometry_msgs::TransformStamped()>& call) {
  Tf2Answer answer;
  try {
    geometry_msgs::TransformStamped t = call();
    answer.pose.translation = {t.transform.translation.x,
                               t.transform.translation.y,
                               t.transform.translation.z};
    answer.pose.rotation = {t.transform.rotation.x, t.transform.rotation.y,
                            t.transform.rotation.z, t.transform.rotation.w};
  } catch (const tf2::ExtrapolationException& e) {
    answer.what = e.what();
    if (answer.what.find("but only time") != std::string::npos) {
      answer.outcome = Tf2Outcome::kExtrapolationOneSample;
    } else if (answer.what.find("past") != std::string::npos) {
      answer.outcome = Tf2Outcome::kExtrapolationPast;
    } else {
      answer.outcome = Tf2Outcome::kExtrapolationFuture;
    }
  } catch (const tf2::ConnectivityException& e) {
    answer.what = e.what();
    answer.outcome = Tf2Outcome::kConnectivity;
  } catch (const tf2::LookupException& e) {
    answer.what = e.what();
    answer.outcome = Tf2Outcome::kLookup;
  }
  return answer;
}

}  // namespace

struct Tf2Oracle::Impl {
  explicit Impl(double cache_seconds) : buffer(ros::Duration(cache_seconds)) {}
  tf2::BufferCore buffer;
};

Tf2Oracle::Tf2Oracle(double cache_seconds)
    : impl_(std::make_unique<Impl>(cache_seconds)) {}
Tf2Oracle::~Tf2Oracle() = default;

bool Tf2Oracle::Set(const std::string& parent, const std::string& child,
                    int64_t stamp_nanos, const Tf2Pose& pose, bool is_static) {
  geometry_msgs::TransformStamped msg;
  msg.header.stamp = RosTime(stamp_nanos);
  msg.header.frame_id = parent;
  msg.child_frame_id = child;
  msg.transform.translation.x = pose.translation[0];
  msg.transform.translation.y = pose.translation[1];
  msg.transform.translation.z = pose.translation[2];
  msg.transform.rotation.x = pose.rotation[0];
  msg.transform.rotation.y = pose.rotation[1];
  msg.transform.rotation.z = pose.rotation[2];
  msg.transform.rotation.w = pose.rotation[3];
  return impl_->buffer.setTransform(msg, "xform", is_static);
}

Tf2Answer Tf2Oracle::Lookup(const std::string& target,
                            const std::string& source,
                            int64_t stamp_nanos) const {
  return Ask([&] {
    return impl_->buffer.lookupTransform(target, source, RosTime(stamp_nanos));
  });
}

Tf2Answer Tf2Oracle::Lookup(const std::string& target,
                            int64_t target_stamp_nanos,
                            const std::string& source,
                            int64_t source_stamp_nanos,
                            const std::string& fixed) const {
  return Ask([&] {
    return impl_->buffer.lookupTransform(target, RosTime(target_stamp_nanos),
                                         source, RosTime(source_stamp_nanos),
                                         fixed);
  });
}

}  // namespace xform
