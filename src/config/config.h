#pragma once
// Run configuration: model sizes, data, optimiser, schedule and run control.
// Resolution order: built-in defaults <- base config (a name or a file) <- config file <-
// command-line --set assignments <- the commands' own options (--data, --steps, --device).
// Named configs are the JSON files under configs/, embedded into the binary at build time,
// so `megafold train` works from any directory. Unknown keys are errors that name the key.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace megafold::config {

struct DataConfig {
  std::string dir = "data/pdb";  // directory of mmCIF/PDB files (searched recursively)
  int64_t crop_size = 384;       // tokens per training crop (contiguous crops)
  int64_t batch_size = 1;
  int64_t val_crop_size = 384;   // validation entries are cropped deterministically to this
  bool overfit = false;          // train on every entry and validate on the same entries
  // Crop mix for training (AF3: contiguous 0.2, spatial 0.4, spatial interface 0.4; weights,
  // not necessarily normalised). Validation always crops contiguously (fixed crops).
  double crop_contiguous = 0.2, crop_spatial = 0.4, crop_spatial_interface = 0.4;
  // Optional per-entry sampling weights, a TSV of "entry<TAB>weight" (e.g. 1 / cluster size);
  // "" samples every entry once per epoch.
  std::string weights;
  // Optional split file, a TSV of "entry<TAB>train|validation" that overrides the name rule for
  // the entries it lists; "" = the rule alone (data/README.md).
  std::string split;
  // Optional cluster file, a TSV of "entry<TAB>cluster": entries are weighted 1 / cluster size
  // so that clusters are drawn equally often (AF3 SI 2.5.1); exclusive with `weights`.
  std::string clusters;
  // What a sample draws: "entry" (a whole entry: once per epoch, or by `weights`/`clusters`) or
  // "af3" (AF3 SI 2.5.1: a chain or an interface of a training entry, weighted by eq. 1, and the
  // spatial crops centred on it; data/sampling.h). "af3" is exclusive with `weights` and
  // `clusters`, which weigh whole entries.
  std::string sampling = "entry";
  // With "af3": optional TSV of "entry<TAB>author chain id<TAB>cluster" for polymer chains
  // (e.g. proteins at 40% identity); "" or unlisted chains: molecule type + exact sequence,
  // ligands by CCD code (data/README.md).
  std::string chain_clusters;
  // MSA rows per example, the query included: the loader draws them from each entry's
  // (unpaired) MSA as a pure function of (seed, step, sample) (data/msa_features.h).
  int64_t msa_rows = 128;
  // Templates per chain shown to the model (AF3 SI 2.4): training draws k uniform in
  // {0..min(max_templates, hits)} of each chain's cached hits per (seed, step, sample);
  // validation and prediction take the top min(max_templates, hits). 0 = none
  // (data/templates.h).
  int64_t max_templates = 4;
  // Loader threads building batches ahead, and how many steps ahead (no effect on the batches).
  int64_t workers = 2;
  int64_t prefetch = 4;
};

struct OptimConfig {
  double lr = 1.8e-3;            // AF3 SI Sec. 5.4
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.0;
  int64_t warmup_steps = 1000;   // linear warm-up from 0
  int64_t decay_every = 50000;   // then lr *= decay_factor every decay_every steps (AF3)
  double decay_factor = 0.95;
  double clip_grad_norm = 10.0;  // 0 disables clipping
  double ema_decay = 0.999;
};

struct TrainConfig {
  std::string name = "custom";
  model::ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  int64_t steps = 1000;
  uint64_t seed = 0;
  std::string device = "auto";   // auto | cpu | cuda | cuda:N
  bool bf16 = true;              // bf16 autocast on CUDA (fp32 master weights); ignored on CPU
  int64_t threads = 0;           // intra-op CPU threads, 0 = all cores
  int64_t log_every = 10;
  int64_t val_every = 100;       // 0 = only at the end, -1 = never (benchmarks)
  int64_t checkpoint_every = 100;
  int64_t keep_checkpoints = 3;
  // Steps whose loss or gradient is not finite are skipped (no update) and named; this many in
  // a row stop the run with an error (0: never stop).
  int64_t max_skipped_steps = 10;
};

// Names of the embedded configs (configs/*.json without extension).
std::vector<std::string> builtin_config_names();

// Loads a config from a file path or an embedded name, then applies `assignments` (see
// apply_assignments). A config's "base" names a built-in config or a file, relative to the
// including file's directory. Throws megafold::Error naming the file (or the assignment) and
// the offending key or value.
TrainConfig load_config(const std::string& file_or_name, const std::vector<std::string>& assignments = {});

// Command-line settings applied in order over a config: each "a.b=value" sets key b of section
// a, the value read as JSON (numbers, true/false, null, arrays, "quoted") or else as a plain
// string (model.memory=frontier). Unknown keys and wrong types are errors naming the
// assignment. The caller validates the result (load_config and parse_config do).
void apply_assignments(TrainConfig& cfg, const std::vector<std::string>& assignments);

// The embedded default for the hardware found: "gpu-small" with CUDA, else "cpu-tiny".
std::string default_config_name(bool cuda_available);

// Fully resolved config as pretty JSON (saved beside metrics.jsonl).
std::string to_json(const TrainConfig& cfg);

// The settings a resumed run must share with its checkpoint (model shape, data and crops, seed:
// they fix the parameters and the sample stream), as "key old -> new" items; "" when equal.
// Steps, schedule and logging may change on resume, and so may the data directory's path, the
// loader's threads and model.memory (the trainer warns when a new mode moves the numerics).
std::string resume_mismatch(const TrainConfig& saved, const TrainConfig& now);

// Parses a JSON config text and applies `assignments`; `origin` names it in errors.
TrainConfig parse_config(const std::string& json_text, const std::string& origin,
                         const std::vector<std::string>& assignments = {});

}  // namespace megafold::config
