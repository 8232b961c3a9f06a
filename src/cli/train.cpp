// `megafold train`: train the trunk on a directory of structures; --nproc N runs N local
// data-parallel ranks (this binary again, with torchrun's variables set).
#include <iostream>

#include "cli/args.h"
#include "cli/local_ranks.h"
#include "core/check.h"
#include "model/memory_plan.h"
#include "config/config.h"
#include "core/device.h"
#include "train/trainer.h"

namespace megafold::cli {

int train_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"config", "FILE|NAME", "config file, or a built-in name (default: gpu-small with a GPU, else cpu-tiny)"},
      set_option(),
      {"out", "DIR", "run folder: config.json, metrics.jsonl, checkpoints/ (default: runs/default)"},
      {"data", "DIR", "directory of mmCIF/PDB files, searched recursively (overrides the config)"},
      {"steps", "N", "total optimiser steps (overrides the config)"},
      {"device", "DEV", "auto, cpu, cuda or cuda:N (overrides the config)"},
      {"seed", "N", "run seed: initialisation, data order, crops, dropout"},
      {"memory", "fast|balanced|frontier", "memory mode: what is kept for backward and where (overrides model.memory)"},
      {"threads", "N", "CPU threads for intra-op parallelism (0 = all cores)"},
      {"resume", "", "continue from the newest checkpoint in --out"},
      {"init", "CHECKPOINT", "start a new run from these weights and their EMA (a model of the same shapes; "
                             "AF3's next training stage), with a fresh optimiser at step 0"},
      {"quiet", "", "no progress output"},
      {"nproc", "N", "ranks on this machine (Gloo); under torchrun or Slurm the launcher's ranks are used"},
      {"pair-shards", "P", "ranks per example: each holds 1/P of the Pairformer's pair rows (P divides the ranks and "
                           "data.crop_size; default 1, plain data parallelism)"},
      {"bucket-mb", "MB", "gradient all-reduce bucket size with several ranks (default 32); buckets are summed while "
                          "backward runs"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::string names;
    for (const auto& n : config::builtin_config_names()) names += (names.empty() ? "" : ", ") + n;
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
    return run_local_ranks("train", static_cast<int>(n), without_nproc(argv));
  }
  config::TrainConfig cfg = config::load_config(
      args.get("config").value_or(config::default_config_name(megafold::cuda_available())), args.get_all("set"));
  if (auto v = args.get("data")) cfg.data.dir = *v;
  if (auto v = args.get("device")) cfg.device = *v;
  if (auto v = args.get("memory")) {
    model::parse_memory_mode(*v);
    cfg.model.memory = *v;
  }
  cfg.steps = args.get_int("steps", cfg.steps);
  cfg.seed = static_cast<uint64_t>(args.get_int("seed", static_cast<int64_t>(cfg.seed)));
  cfg.threads = args.get_int("threads", cfg.threads);
  if (cfg.steps <= 0) throw Error("--steps must be > 0");

  train::TrainOptions opts;
  opts.out_dir = args.get("out").value_or("runs/default");
  opts.resume = args.has("resume");
  opts.init = args.get("init").value_or("");
  opts.quiet = args.has("quiet");
  opts.pair_shards = static_cast<int>(args.get_int("pair-shards", 1));
  if (auto v = args.get("bucket-mb")) {
    try {
      opts.bucket_mb = std::stod(*v);
    } catch (const std::exception&) {
      throw Error("--bucket-mb must be a number of megabytes, got '" + *v + "'");
    }
  }
  const train::TrainResult r = train::run_training(cfg, opts);
  if (!opts.quiet) {
    std::printf("%s: %lld steps, loss %.4f -> %.4f (first/last 10%% mean), median step %.1f ms, "
                "peak memory %.2f GB, %lld steps skipped (non-finite)\n",
                r.stopped ? "stopped" : "done", static_cast<long long>(r.steps_done), r.first_loss, r.last_loss,
                r.step_ms, r.peak_gb, static_cast<long long>(r.skipped_steps));
  }
  if (r.stopped) {
    std::fprintf(stderr, "megafold train: stopped by a signal before step %lld; a checkpoint was written: continue "
                 "with --resume (exit code %d)\n", static_cast<long long>(cfg.steps), kExitStopped);
    return kExitStopped;
  }
  return 0;
}

}  // namespace megafold::cli
