// Copyright 2026 The xform Authors.

#include "tools/load/spawn.h"

extern char** environ;

namespace xform::load {

pid_t Spawn(const std::vector<std::string>& command,
            const posix_spawn_file_actions_t* actions) {
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& arg : command) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error =
      posix_spawnp(&pid, argv[0], actions, nullptr, argv.data(), environ);
  return error == 0 ? pid : 0;
}

}  // namespace xform::load
