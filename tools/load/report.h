// Copyright 2026 The xform Authors.
//
// xform-load's report of a run's modes: a Markdown table (the figures
// docs/benchmarks.md quotes), or JSON for scripts.

#ifndef XFORM_TOOLS_LOAD_REPORT_H_
#define XFORM_TOOLS_LOAD_REPORT_H_

#include <string>
#include <vector>

#include "tools/load/load_run.h"

namespace xform::load {

void PrintTable(const Config& config, const std::vector<ModeResult>& results);
std::string ReportJson(const Config& config,
                       const std::vector<ModeResult>& results);

}  // namespace xform::load

#endif  // XFORM_TOOLS_LOAD_REPORT_H_
