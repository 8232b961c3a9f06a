#pragma once
// The training loop: data -> model -> losses -> AdamW/EMA -> checkpoints and metrics.
#include <string>

#include "config/config.h"

namespace megafold::train {

struct TrainOptions {
  std::string out_dir;
  bool resume = false;  // continue from the newest checkpoint in out_dir/checkpoints
  // A new run's starting weights, their EMA and the model's buffers: a checkpoint of a run whose model has the same
  // shapes (AF3's training stages: each fine-tuning stage starts from the stage before); the
  // optimiser, step count and data stream start afresh. Ignored when resuming a started run.
  std::string init;
  bool quiet = false;   // no progress output (tests)
  // Ranks per pair-sharding group (1: none): consecutive ranks share one example and split the
  // Pairformer's pair representation by rows; the world / pair_shards groups are data parallel.
  int pair_shards = 1;
  // Gradient all-reduce bucket size (MB of fp32 gradients); buckets are summed while backward runs.
  double bucket_mb = 32;
};

struct TrainResult {
  int64_t steps_done = 0;
  double first_loss = 0, last_loss = 0;  // mean over the first / last log window
  double step_ms = 0;                    // median step time over the run (after warm-up)
  double peak_gb = 0;
  int64_t skipped_steps = 0;  // steps with a non-finite loss or gradient (no update)
  bool stopped = false;       // a stop signal ended the run early (a checkpoint was written)
};

// Learning rate at optimiser step `step` (0-based): linear warm-up, then step decay (AF3).
double learning_rate(const config::OptimConfig& o, int64_t step);

TrainResult run_training(const config::TrainConfig& cfg, const TrainOptions& opts);

}  // namespace megafold::train
