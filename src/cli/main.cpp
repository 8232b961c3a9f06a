// megafold: command-line entry. One subcommand per file in src/cli/.
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"

namespace {

constexpr const char* kUsage =
    "usage: megafold <command> [options]\n\n"
    "commands:\n"
    "  info    build, versions, devices and registered ops\n"
    "  train   train the model on mmCIF/PDB structures\n"
    "  predict structures and pLDDT for one input (mmCIF/PDB/FASTA) with a checkpoint\n"
    "  eval    lDDT of predicted structures over a directory of structures\n"
    "  export  a checkpoint's weights as safetensors keyed by parameter name, with its config\n"
    "  plot    a run's loss, lDDT and pLDDT curves as a PNG (and TensorBoard scalars)\n"
    "  cache   parse structures (and MSAs) once into a feature cache for training\n"
    "  inspect what the loader makes of a structure or FASTA file: chains, molecule types, tokens, bonds\n"
    "  fit     train a workload a few steps at one crop and memory mode: step time, peak memory\n"
    "  memory  per-module memory of a training step of the whole model\n"
    "  config  the resolved config of a name or file, with --set applied (show), or the built-in names (list)\n"
    "  dev     benchmarks and verifiers: dev block, dev loader, dev shard-check, dev hand-probe\n\n"
    "Run 'megafold <command> --help' for the options of a command.\n";

constexpr const char* kDevUsage =
    "usage: megafold dev <command> [options]\n\n"
    "benchmarks and verifiers:\n"
    "  block        time one Pairformer block forward and backward (kernels or references)\n"
    "  loader       measure loader throughput (samples/s) from raw files or a cache\n"
    "  shard-check  check the row-sharded pair stack against the unsharded one on P ranks\n"
    "  synth-cache  write a feature cache of many synthetic entries (loader benchmarks at scale)\n"
    "  hand-probe   whether a checkpoint's denoiser keeps a structure's hand or its mirror image's\n\n"
    "Run 'megafold dev <command> --help' for its options.\n";

int dev_main(std::vector<std::string> args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kDevUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "block") return megafold::cli::block_main(args);
  if (command == "loader") return megafold::cli::loader_main(args);
  if (command == "shard-check") return megafold::cli::shard_check_main(args);
  if (command == "synth-cache") return megafold::cli::synth_cache_main(args);
  if (command == "hand-probe") return megafold::cli::hand_probe_main(args);
  std::cerr << "megafold dev: unknown command '" << command << "'\n\n" << kDevUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "info") return megafold::cli::info_main(args);
    if (command == "train") return megafold::cli::train_main(args);
    if (command == "predict") return megafold::cli::predict_main(args);
    if (command == "eval") return megafold::cli::eval_main(args);
    if (command == "cache") return megafold::cli::cache_main(args);
    if (command == "inspect") return megafold::cli::inspect_main(args);
    if (command == "dev") return dev_main(args);
    if (command == "fit") return megafold::cli::fit_main(args);
    if (command == "memory") return megafold::cli::memory_main(args);
    if (command == "config") return megafold::cli::config_main(args);
    if (command == "export") return megafold::cli::export_main(args);
    if (command == "plot") return megafold::cli::plot_main(args);
    std::cerr << "megafold: unknown command '" << command << "'\n\n" << kUsage;
    return 2;
  } catch (const std::exception& ex) {
    std::cerr << "megafold " << command << ": error: " << ex.what() << "\n";
    return 1;
  }
}
