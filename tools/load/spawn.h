// Copyright 2026 The xform Authors.
//
// Starting the processes a run needs: xformd, redis-server, and the
// subscriber processes of --subscriber_processes.

#ifndef XFORM_TOOLS_LOAD_SPAWN_H_
#define XFORM_TOOLS_LOAD_SPAWN_H_

#include <spawn.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace xform::load {

// Starts `command` (its first word found on PATH, unless it is a path), with
// `actions` done on the child's descriptors first (null: none). Its pid, or
// 0 if it could not be started.
pid_t Spawn(const std::vector<std::string>& command,
            const posix_spawn_file_actions_t* actions = nullptr);

}  // namespace xform::load

#endif  // XFORM_TOOLS_LOAD_SPAWN_H_
