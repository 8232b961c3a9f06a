// `megafold info`: build, versions, devices and registered ops.
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <iostream>

#include "cli/args.h"
#include "config/config.h"
#include "core/device.h"

namespace megafold::cli {

int info_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {{"help", "", "show this help"}};
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("info", "Print the build, library versions, devices and registered ops.", specs);
    return 0;
  }
  std::cout << "megafold " << MEGAFOLD_VERSION << " (commit " << MEGAFOLD_GIT_COMMIT << ")\n"
            << "build: " <<
#ifdef MEGAFOLD_CUDA
      "CUDA (kernels for sm_90a)"
#else
      "CPU-only"
#endif
            << ", C++ " << __cplusplus << ", compiler " << __VERSION__ << "\n"
            << "libtorch: " << MEGAFOLD_TORCH_VERSION << ", " << at::get_parallel_info();
  for (const auto& line : megafold::describe_devices()) std::cout << "device " << line << "\n";
  std::cout << "ops:";
  for (const auto& op : c10::Dispatcher::singleton().getAllOpNames())
    if (op.name.rfind("megafold::", 0) == 0) std::cout << " " << op.name;
  std::cout << "\nconfigs:";
  for (const auto& name : config::builtin_config_names()) std::cout << " " << name;
  std::cout << "\n";
  return 0;
}

}  // namespace megafold::cli
