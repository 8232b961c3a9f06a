// megafold plot: a run's loss, lDDT and pLDDT curves as a PNG (and TensorBoard scalars), drawn by
// python/megafold/metrics.py with the Python this build was configured with (matplotlib:
// installed by setup). $MEGAFOLD_PYTHON names another interpreter.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/check.h"

namespace megafold::cli {
namespace {
namespace fs = std::filesystem;

// Runs argv[0] with argv (no shell); returns its exit code, or 128 + signal.
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> c_argv;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  const pid_t pid = fork();
  MF_CHECK(pid >= 0, "plot: cannot start ", argv[0]);
  if (pid == 0) {
    execvp(c_argv[0], c_argv.data());
    std::cerr << "megafold plot: cannot run " << argv[0] << " (set MEGAFOLD_PYTHON to a Python 3 with matplotlib)\n";
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int plot_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"png", "FILE", "where to write the curves (default RUN_DIR/metrics.png)"},
      {"tensorboard", "DIR", "also write the metrics as TensorBoard scalars into DIR"},
      {"help", "", "show this help"}};
  // RUN_DIR comes first; the options follow it.
  const bool has_dir = !argv.empty() && argv[0].rfind("--", 0) != 0;
  const Args args(std::vector<std::string>(argv.begin() + (has_dir ? 1 : 0), argv.end()), specs);
  if (args.has("help") || !has_dir) {
    std::cout << usage("plot RUN_DIR", "Loss, lDDT and pLDDT curves of a run (its metrics.jsonl) as a PNG.", specs);
    return args.has("help") ? 0 : 2;
  }
  const std::string run_dir = argv[0];
  const fs::path metrics = fs::path(run_dir) / "metrics.jsonl";
  MF_CHECK(fs::is_regular_file(metrics), metrics.string(), ": no such file (is ", run_dir,
           " the --out folder of a megafold train run?)");
  const char* env = std::getenv("MEGAFOLD_PYTHON");
  std::vector<std::string> cmd = {env != nullptr && *env != '\0' ? env : MEGAFOLD_PYTHON_EXE, MEGAFOLD_METRICS_SCRIPT,
                                  run_dir};
  for (const char* name : {"png", "tensorboard"})
    if (const auto v = args.get(name)) {
      cmd.push_back(std::string("--") + name);
      cmd.push_back(*v);
    }
  return run_program(cmd);
}

}  // namespace megafold::cli
