#pragma once
// A small long-option parser shared by the subcommands: --name VALUE, --name=VALUE, --flag.
// Unknown options are errors that list the valid ones.
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megafold::cli {

struct OptionSpec {
  std::string name;   // without the leading dashes
  std::string value;  // placeholder shown in help ("" for a flag)
  std::string help;
  bool repeatable = false;  // may be given several times (get_all); otherwise the last one wins
};

class Args {
 public:
  // Throws megafold::Error on an unknown option, a missing value or a stray argument.
  Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> get(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  // Every value of a repeatable option, in command-line order.
  std::vector<std::string> get_all(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_;
};

// The --set option of the commands that take a config (train, predict, eval, config show).
OptionSpec set_option();

std::string usage(const std::string& command, const std::string& summary,
                  const std::vector<OptionSpec>& specs);

// Exit codes: 0 done, 1 error (named on stderr), 2 usage; a run stopped by SIGINT, SIGTERM or
// SIGHUP after writing its checkpoint exits kExitStopped (EX_TEMPFAIL: incomplete, resumable),
// so a scheduler can tell it from a finished one.
inline constexpr int kExitStopped = 75;

// Subcommands; each returns the process exit code.
int info_main(const std::vector<std::string>& args);
int train_main(const std::vector<std::string>& args);
int predict_main(const std::vector<std::string>& args);
int eval_main(const std::vector<std::string>& args);
int cache_main(const std::vector<std::string>& args);
int inspect_main(const std::vector<std::string>& args);
int loader_main(const std::vector<std::string>& args);
int block_main(const std::vector<std::string>& args);
int shard_check_main(const std::vector<std::string>& args);
int hand_probe_main(const std::vector<std::string>& args);
int fit_main(const std::vector<std::string>& args);
int memory_main(const std::vector<std::string>& args);
int config_main(const std::vector<std::string>& args);
int export_main(const std::vector<std::string>& args);
int plot_main(const std::vector<std::string>& args);
int synth_cache_main(const std::vector<std::string>& args);

}  // namespace megafold::cli
