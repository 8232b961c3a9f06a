// megafold config: the resolved configuration of a built-in name or a file, with --set
// assignments applied, as the JSON a run saves (config show), or the built-in names (list).
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/check.h"
#include "config/config.h"
#include "core/device.h"

namespace megafold::cli {

int config_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"config", "FILE|NAME", "config file or built-in name (default: gpu-small with a GPU, else cpu-tiny)"},
      set_option(),
      {"help", "", "show this help"},
  };
  const std::string action = argv.empty() || argv[0].rfind("--", 0) == 0 ? "" : argv[0];
  std::vector<std::string> rest(argv.begin() + (action.empty() ? 0 : 1), argv.end());
  // `config show NAME|FILE` takes the config positionally as well as through --config.
  if (action == "show" && !rest.empty() && rest[0].rfind("--", 0) != 0) {
    rest[0] = "--config=" + rest[0];
  }
  const Args args(rest, specs);
  if (args.has("help") || action.empty()) {
    std::cout << usage("config show [NAME|FILE] | config list",
                       "show: print the fully resolved config (base chain, file, then --set assignments "
                       "applied, every key with its value) as 'megafold train' would save it.\nlist: the "
                       "built-in config names.",
                       specs);
    return action.empty() && !args.has("help") ? 2 : 0;
  }
  if (action == "list") {
    for (const std::string& n : config::builtin_config_names()) std::cout << n << "\n";
    return 0;
  }
  MF_CHECK(action == "show", "unknown action '", action, "' (show or list)");
  const std::string name = args.get("config").value_or(config::default_config_name(megafold::cuda_available()));
  std::cout << config::to_json(config::load_config(name, args.get_all("set")));
  return 0;
}

}  // namespace megafold::cli
