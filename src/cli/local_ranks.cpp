// Local ranks for --nproc: this binary again, once per rank, with torchrun's variables set.
#include "cli/local_ranks.h"

#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/check.h"

extern "C" char** environ;

namespace megafold::cli {
namespace {

// A TCP port on the loopback interface that is free now (the rendezvous of local ranks).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  MF_CHECK(fd >= 0, "--nproc: cannot open a socket: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  MF_CHECK(ok, "--nproc: cannot find a free port: ", std::strerror(errno));
  return ntohs(a.sin_port);
}

}  // namespace

int run_local_ranks(const std::string& command, int n, const std::vector<std::string>& args) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e, key = kv.substr(0, kv.find('='));
      if (key != "RANK" && key != "WORLD_SIZE" && key != "LOCAL_RANK" && key != "MASTER_ADDR" && key != "MASTER_PORT")
        env.push_back(kv);
    }
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"RANK", std::to_string(rank)},
                               {"WORLD_SIZE", std::to_string(n)}, {"LOCAL_RANK", std::to_string(rank)},
                               {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}})
      env.push_back(k + "=" + v);
    std::vector<std::string> argv = {self};
    for (size_t at = 0; at < command.size();) {  // the command's words
      const size_t space = std::min(command.find(' ', at), command.size());
      argv.push_back(command.substr(at, space - at));
      at = space + 1;
    }
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv, cenv;
    for (std::string& a : argv) cargv.push_back(a.data());
    for (std::string& e : env) cenv.push_back(e.data());
    cargv.push_back(nullptr);
    cenv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, self.c_str(), nullptr, nullptr, cargv.data(), cenv.data());
    MF_CHECK(rc == 0, "--nproc: cannot start rank ", rank, ": ", std::strerror(rc));
    pids.push_back(pid);
  }
  int result = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      std::cerr << "megafold " << command << ": rank " << r << " exited with " << code << "\n";
      result = code;
    }
  }
  return result;
}

std::vector<std::string> without_nproc(const std::vector<std::string>& argv) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--nproc")
      ++i;  // and its value
    else if (argv[i].rfind("--nproc=", 0) != 0)
      rest.push_back(argv[i]);
  }
  return rest;
}

}  // namespace megafold::cli
