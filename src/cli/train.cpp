// `megafold train`: train the trunk on a directory of structures; --nproc N runs N local
// data-parallel ranks (this binary again, with torchrun's variables set).
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli/args.h"
#include "core/check.h"
#include "train/config.h"
#include "train/device.h"
#include "train/trainer.h"

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

// Runs `megafold train <args>` as ranks 0..n-1 of one job on this machine and waits for all;
// the exit code is the first failing rank's (or 0).
int run_local_ranks(int n, const std::vector<std::string>& args) {
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
    std::vector<std::string> argv = {self, "train"};
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
      std::cerr << "megafold train: rank " << r << " exited with " << code << "\n";
      result = code;
    }
  }
  return result;
}

}  // namespace

int train_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"config", "FILE|NAME", "config file, or a built-in name (default: gpu-small with a GPU, else cpu-tiny)"},
      {"out", "DIR", "run folder: config.json, metrics.jsonl, checkpoints/ (default: runs/default)"},
      {"data", "DIR", "directory of mmCIF/PDB files, searched recursively (overrides the config)"},
      {"steps", "N", "total optimiser steps (overrides the config)"},
      {"device", "DEV", "auto, cpu, cuda or cuda:N (overrides the config)"},
      {"seed", "N", "run seed: initialisation, data order, crops, dropout"},
      {"threads", "N", "CPU threads for intra-op parallelism (0 = all cores)"},
      {"resume", "", "continue from the newest checkpoint in --out"},
      {"quiet", "", "no progress output"},
      {"nproc", "N", "data-parallel ranks on this machine (Gloo); under torchrun or Slurm the launcher's ranks are used"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::string names;
    for (const auto& n : train::builtin_config_names()) names += (names.empty() ? "" : ", ") + n;
    std::cout << usage("train",
                       "Train the Pairformer trunk with the distogram loss on bundled or your own "
                       "structures; configs with model.diffusion.samples > 0 also train the diffusion "
                       "module (all-atom structure) and report the lDDT of sampled structures at "
                       "validation.\nThe fully resolved config is saved as <out>/config.json; metrics "
                       "go to <out>/metrics.jsonl.\nBuilt-in configs: " + names + " (configs/*.json).",
                       specs);
    return 0;
  }
  if (args.has("nproc")) {
    const int64_t n = args.get_int("nproc", 1);
    MF_CHECK(n >= 1 && n <= 1024, "--nproc must lie in [1, 1024], got ", n);
    std::vector<std::string> rest;
    for (size_t i = 0; i < argv.size(); ++i) {
      if (argv[i] == "--nproc") {
        ++i;  // and its value
      } else if (argv[i].rfind("--nproc=", 0) != 0) {
        rest.push_back(argv[i]);
      }
    }
    return run_local_ranks(static_cast<int>(n), rest);
  }
  train::TrainConfig cfg =
      train::load_config(args.get("config").value_or(train::default_config_name(train::cuda_available())));
  if (auto v = args.get("data")) cfg.data.dir = *v;
  if (auto v = args.get("device")) cfg.device = *v;
  cfg.steps = args.get_int("steps", cfg.steps);
  cfg.seed = static_cast<uint64_t>(args.get_int("seed", static_cast<int64_t>(cfg.seed)));
  cfg.threads = args.get_int("threads", cfg.threads);
  if (cfg.steps <= 0) throw Error("--steps must be > 0");

  train::TrainOptions opts;
  opts.out_dir = args.get("out").value_or("runs/default");
  opts.resume = args.has("resume");
  opts.quiet = args.has("quiet");
  const train::TrainResult r = train::run_training(cfg, opts);
  if (!opts.quiet) {
    std::printf("done: %lld steps, loss %.4f -> %.4f (first/last 10%% mean), median step %.1f ms, "
                "peak memory %.2f GB\n",
                static_cast<long long>(r.steps_done), r.first_loss, r.last_loss, r.step_ms, r.peak_gb);
  }
  return 0;
}

}  // namespace megafold::cli
