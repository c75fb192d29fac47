// Copyright 2026 The xform Authors.
//
// How xformctl prints what a server says: each kind of answer as a JSON
// object (--json, one a line) and as aligned text for people, and each
// message of `xformctl watch`.

#ifndef XFORM_TOOLS_CTL_FORMAT_H_
#define XFORM_TOOLS_CTL_FORMAT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/stream_stats.h"
#include "xform/subscriber_info.h"

namespace xform::ctl {

using Json = nlohmann::json;

const char* ModeName(FrameMode mode);

Json ToJson(const StreamStats& s);
Json ToJson(const WorldInfo& w);
Json ToJson(const NodeInfo& n);
Json ToJson(const SubscriberInfo& s);

std::string ToText(const NodeInfo& n);
// Two lines a subscriber: who and what it asked for, then where it stands
// and what it was sent.
std::string ToText(const SubscriberInfo& s, absl::Time now);
std::string ToText(const WorldInfo& w);

// A local pose as ten floats: position, rotation (x, y, z, w), scale.
std::vector<float> Floats(const Transform& t);

// A watched message: its counts and latency, as JSON and as a line.
Json UpdateJson(const MirrorUpdate& u);
std::string UpdateText(const MirrorUpdate& u);
// --verbose: every change of it, added to both (matrices in JSON only
// when `json`, positions in the text otherwise).
void AddUpdateDetail(const MirrorUpdate& u, bool json, Json& line,
                     std::string& text);

}  // namespace xform::ctl

#endif  // XFORM_TOOLS_CTL_FORMAT_H_
