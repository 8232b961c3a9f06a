#include "train/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "core/check.h"
#include "core/files.h"
#include "core/seed.h"
#include "data/dataset.h"
#include "data/crop.h"
#include "data/features.h"
#include "data/loader.h"
#include "data/sampling.h"
#include "dist/grad_sync.h"
#include "dist/process_group.h"
#include "core/autocast.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/scoring.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "train/ema.h"
#include "train/metrics.h"
#include "train/optimizer.h"

namespace megafold::train {
namespace fs = std::filesystem;
namespace {

// Salts that keep the seed streams of different purposes apart.
constexpr uint64_t kCropSalt = 0x63726f70;     // "crop"
constexpr uint64_t kDropoutSalt = 0x64726f70;  // "drop"
constexpr uint64_t kValidationSalt = 0x76616c; // "val"
constexpr uint64_t kMsaSalt = 0x6d7361;        // "msa"
constexpr uint64_t kTemplateSalt = 0x746d706c; // "tmpl"
constexpr uint64_t kNoiseSalt = 0x6e6f6973;    // "nois": diffusion noise, augmentation, levels
constexpr uint64_t kRecycleSalt = 0x72656379;  // "recy": trunk passes per training step

std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested = true; }

// SIGINT/SIGTERM/SIGHUP (a closed terminal or ssh session) finish the current step, write a
// checkpoint and return (TrainResult::stopped).
class StopSignals {
 public:
  StopSignals() {
    g_stop_requested = false;
    for (size_t i = 0; i < kSignals.size(); ++i) previous_[i] = std::signal(kSignals[i], on_stop_signal);
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) std::signal(kSignals[i], previous_[i]);
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<void (*)(int), 3> previous_{};
};

// Holds <out>/.lock (flock) while a run trains into <out>, so that a second run into the same
// folder stops with a message instead of overwriting the first one's checkpoints and metrics.
// The kernel drops the lock when the process ends, however it ends.
class RunLock {
 public:
  explicit RunLock(const fs::path& dir) {
    const std::string path = (dir / ".lock").string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    MF_CHECK(fd_ >= 0, "cannot open ", path, ": ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {};
      const ssize_t n = ::pread(fd_, pid, sizeof(pid) - 1, 0);
      ::close(fd_);
      throw Error("--out " + dir.string() + " is in use by another megafold train (pid " +
                  (n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("unknown")) +
                  "); wait for it to finish or choose another --out");
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
      std::cerr << "warning: cannot record this run's pid in " << path << ": " << std::strerror(errno) << "\n";
  }
  ~RunLock() { ::close(fd_); }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// Rank r of a data-parallel job of `world` ranks takes samples (step * world + r) * batch + b of
// the stream: every rank its own, and the same global sequence for any world size at batch 1
// per rank.
data::Batch training_batch(const data::Dataset& ds, const config::TrainConfig& cfg, uint64_t seed, int64_t step, int rank,
                           int world) {
  std::vector<std::shared_ptr<const data::Entry>> held;  // decoded cache entries live until the batch is built
  std::vector<const data::Entry*> entries;
  std::vector<std::vector<int32_t>> crops;
  const int64_t slot = step * world + rank;
  for (int64_t b = 0; b < cfg.data.batch_size; ++b) {
    const uint64_t g = static_cast<uint64_t>(slot * cfg.data.batch_size + b);
    const data::CropWeights weights{cfg.data.crop_contiguous, cfg.data.crop_spatial, cfg.data.crop_spatial_interface};
    // The spatial crops centre on the drawn chain or interface under data.sampling af3.
    auto [entry, crop] = data::sample_or_replace(
        ds, seed, g, [&](const data::Entry& e, uint64_t draw, const data::CropFocus& focus) {
          return data::training_crop(e, static_cast<int>(cfg.data.crop_size), weights, mix_seed(seed ^ kCropSalt, draw),
                                     focus);
        });
    entries.push_back(entry.get());
    held.push_back(std::move(entry));
    crops.push_back(std::move(crop));
  }
  // Entry b of the batch draws its MSA rows with mix_seed(msa seed, b): a function of (seed, g).
  const data::MsaSampling msa{cfg.data.msa_rows, mix_seed(seed ^ kMsaSalt, static_cast<uint64_t>(slot))};
  // Likewise its templates (AF3 SI 2.4: a random number of each chain's hits in training).
  const data::TemplateSampling templates{cfg.data.max_templates, true,
                                         mix_seed(seed ^ kTemplateSalt, static_cast<uint64_t>(slot))};
  return data::make_batch(entries, crops, static_cast<int>(cfg.data.crop_size), msa, templates);
}

struct Validation {
  double loss = 0, accuracy = 0, pairs = 0;
  // With a diffusion module: lDDT of one sampled structure per entry, averaged over entries,
  // and with a confidence head the mean pLDDT of those structures' resolved atoms, their pTM
  // and mean PAE over real token pairs, and ipTM averaged over the entries with several chains.
  double lddt_ca = 0, lddt_all = 0, plddt = 0, ptm = 0, mean_pae = 0, iptm = 0;
  double mirrored = 0;  // the fraction of those structures that are their entry's mirror image
  int structures = 0, multichain = 0;
  // All-atom lDDT per molecule type, averaged over the entries that have that type.
  std::array<double, data::kNumMolTypes> lddt_type{};
  std::array<int, data::kNumMolTypes> type_entries{};
};

Validation validate(model::MegaFold& model, const data::Dataset& ds, const config::TrainConfig& cfg,
                    const c10::Device& device, bool autocast) {
  Validation v;
  at::NoGradGuard no_grad;
  model->eval();
  for (const data::EntryRef& ref : ds.validation) {
    std::shared_ptr<const data::Entry> held;
    try {
      held = ref.get();
    } catch (const std::exception& ex) {  // a damaged cache entry: named, left out of this validation
      std::cerr << "warning: validation entry " << ref.name() << " skipped: " << ex.what() << std::endl;
      continue;
    }
    const data::Entry& e = *held;
    // Fixed crops, independent of the run seed and of the other entries, so runs compare.
    const auto crop = data::contiguous_crop(e, static_cast<int>(cfg.data.val_crop_size),
                                            mix_seed(kValidationSalt, fnv1a32(e.name)));
    const data::Batch batch =
        data::make_batch({&e}, {crop}, 0, {cfg.data.msa_rows, mix_seed(kValidationSalt ^ kMsaSalt, fnv1a32(e.name))},
                         {cfg.data.max_templates, false, 0})
            .to(device);
    AutocastScope ac(at::kCUDA, autocast, at::kBFloat16);
    const model::TrunkOutput out = model->forward(batch, 0);
    const model::DistogramMetrics m =
        model::distogram_loss(out.distogram_logits, batch.rep_coords,
                              batch.rep_mask * batch.token_mask, cfg.model.distogram_min,
                              cfg.model.distogram_max);
    const double pairs = m.pairs.item<double>();
    v.loss += m.loss.item<double>() * pairs;
    v.accuracy += m.accuracy.item<double>() * pairs;
    v.pairs += pairs;
    if (model->has_diffusion()) {
      const model::Prediction pred =
          model->predict(batch, out, 1, mix_seed(kValidationSalt ^ kNoiseSalt, fnv1a32(e.name)));
      const model::StructureScores sc = model::score_structures(pred.coords, batch);
      v.lddt_ca += sc.lddt_ca.item<double>();
      v.lddt_all += sc.lddt_all.item<double>();
      v.mirrored += sc.mirrored.item<double>();
      for (int t = 0; t < data::kNumMolTypes; ++t)
        if (const double x = sc.lddt_by_type[0][t].item<double>(); std::isfinite(x)) {
          v.lddt_type[t] += x;
          ++v.type_entries[t];
        }
      if (pred.plddt.defined()) {
        const at::Tensor m = (batch.atom_mask * batch.token_mask.unsqueeze(-1)).reshape({1, -1});
        v.plddt += ((pred.plddt * m).sum() / m.sum().clamp_min(1)).item<double>();
        const at::Tensor pairs = batch.token_mask.unsqueeze(2) * batch.token_mask.unsqueeze(1);
        v.mean_pae += ((pred.pae * pairs).sum() / pairs.sum().clamp_min(1)).item<double>();
        v.ptm += pred.ptm[0].item<double>();
        if (const double iptm = pred.iptm[0].item<double>(); std::isfinite(iptm)) {
          v.iptm += iptm;
          ++v.multichain;
        }
      }
      ++v.structures;
    }
  }
  model->train();
  if (v.pairs > 0) {
    v.loss /= v.pairs;
    v.accuracy /= v.pairs;
  }
  if (v.structures > 0) {
    v.lddt_ca /= v.structures;
    v.lddt_all /= v.structures;
    v.mirrored /= v.structures;
    v.plddt /= v.structures;
    v.ptm /= v.structures;
    v.mean_pae /= v.structures;
  }
  if (v.multichain > 0) v.iptm /= v.multichain;
  for (int t = 0; t < data::kNumMolTypes; ++t)
    if (v.type_entries[t] > 0) v.lddt_type[t] /= v.type_entries[t];
  return v;
}

// What to say when a step runs out of GPU memory: the crop, the memory mode and the peak, what
// to try instead, and where the run can resume from.
std::string out_of_memory_advice(const config::TrainConfig& cfg, int64_t step, const c10::Device& device,
                                 const std::optional<std::string>& checkpoint) {
  std::ostringstream os;
  os << "step " << step << " ran out of GPU memory on " << device.str() << " at data.crop_size "
     << cfg.data.crop_size << " under memory mode '" << cfg.model.memory << "' (peak " << peak_memory_gb(device)
     << " GB). Try: ";
  const model::MemoryMode mode = model::parse_memory_mode(cfg.model.memory);
  if (mode == model::MemoryMode::kFast) os << "--memory balanced (or frontier), ";
  else if (mode == model::MemoryMode::kBalanced) os << "--memory frontier, ";
  os << "a smaller data.crop_size, or --pair-shards P to split the pair representation over P GPUs "
        "(bench/results/frontier.json lists the longest crop each mode fits on one H200). ";
  os << (checkpoint ? "The last checkpoint, " + *checkpoint + ", is intact: add --resume to continue from it."
                    : "No checkpoint was written yet.");
  return os.str();
}

double mean(const std::vector<double>& xs, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += xs[i];
  return end > begin ? s / static_cast<double>(end - begin) : 0.0;
}

}  // namespace

double learning_rate(const config::OptimConfig& o, int64_t step) {
  if (o.warmup_steps > 0 && step < o.warmup_steps)
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const int64_t after = step - std::max<int64_t>(o.warmup_steps, 0);
  const int64_t decays = o.decay_every > 0 ? after / o.decay_every : 0;
  return o.lr * std::pow(o.decay_factor, static_cast<double>(decays));
}

namespace {

// What one optimiser step gives the log.
struct StepOutcome {
  model::Losses loss;
  double loss_value = 0, grad_norm = 0;
  bool finite = false;
};

// A training run between its steps: devices and process groups, data, model, optimiser, EMA
// and metrics. The constructor sets it all up (resuming from the newest checkpoint when
// asked); step(), log(), validate() and checkpoint() are the loop's pieces.
class Run {
 public:
  Run(const config::TrainConfig& cfg_in, const TrainOptions& opts);

  // Forward, backward (gradients summed over the ranks while it runs), clipping, and the
  // AdamW and EMA update unless the loss or the gradient norm is not finite.
  StepOutcome step(const data::Batch& batch, int64_t step, double lr, Progress& progress);
  // One metrics line for the step just done.
  void log(int64_t step, const StepOutcome& s, const data::Batch& batch, double lr, double ms, double data_wait_ms);
  // Distogram and structure scores of the validation entries under the EMA weights (rank 0).
  void validate(int64_t step, Progress& progress);
  // Rank 0 writes <out>/checkpoints/step_<step>.pt atomically.
  void checkpoint(int64_t step);
  // Whether every rank has been asked to stop (a stop signal on any of them).
  bool stop_requested();
  // TrainOptions::init: the checkpoint's training weights into the model, its EMA weights into
  // the EMA; a model of other shapes fails naming the file.
  void initialise_from(const std::string& path);
  void say(const std::string& s) const {
    if (!quiet) std::cout << s << std::endl;
  }
  // How many training entries have templates, from up to 64 spread over the set (a cache is
  // decoded entry by entry); a warning when none has any, since the template embedder then
  // trains on nothing. Structure files carry no template hits: only a feature cache built with
  // --templates does.
  void report_templates(const data::Dataset& ds) const {
    const char* fix = "build a feature cache with `megafold cache --templates DIR --template-mmcif DIR` and train on it";
    if (ds.cache_dir.empty()) {
      std::cerr << "warning: model.templates is on, but " << cfg.data.dir
                << " holds structure files, which carry no templates: the template embedder will see none (" << fix
                << ")" << std::endl;
      return;
    }
    const size_t n = ds.train.size(), looked = std::min<size_t>(n, 64);
    size_t with = 0;
    for (size_t k = 0; k < looked; ++k) {
      try {
        const auto e = ds.train[k * n / looked].get();
        with += std::any_of(e->templates.begin(), e->templates.end(), [](const auto& t) { return !t.empty(); });
      } catch (const std::exception&) {  // a damaged entry is named and replaced when it is drawn
      }
    }
    say("templates: " + std::to_string(with) + " of " + std::to_string(looked) + " training entries looked at have some");
    if (with == 0)
      std::cerr << "warning: model.templates is on, but none of " << looked << " training entries of " << cfg.data.dir
                << " has templates: the template embedder will see none (" << fix << ")" << std::endl;
  }

  config::TrainConfig cfg;
  int data_rank = 0, data_world = 1;
  c10::Device device{c10::kCPU};
  bool lead = true, quiet = false, autocast = false;
  fs::path out_dir, ckpt_dir;
  int64_t start = 0;  // the first step to run (after a resume, the checkpoint's)
  data::Dataset ds;
  int64_t skipped_total = 0, skipped_in_row = 0;  // steps with a non-finite loss or gradient

 private:
  std::unique_ptr<dist::ProcessGroup> dp_, pairs_;
  model::MegaFold model_{nullptr};
  std::vector<at::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<Ema> ema_;
  std::optional<MetricsLog> metrics_;
  std::optional<dist::GradientSync> grad_sync_;
  // The confidence head's latest losses and rollout lDDT (it trains every confidence.every steps).
  struct ConfidenceLosses {
    double plddt, pae, pde, resolved, rollout_lddt, rollout_mirrored;
  };
  std::optional<ConfidenceLosses> last_confidence_;
  std::optional<RunLock> lock_;
};

Run::Run(const config::TrainConfig& cfg_in, const TrainOptions& opts) : cfg(cfg_in) {
  // Data parallelism when launched as one of several ranks (torchrun, Slurm, train --nproc):
  // rank 0 logs, validates and writes checkpoints; every rank averages its gradients with the
  // others before the (identical) optimiser step.
  // With pair sharding, groups of opts.pair_shards consecutive ranks train on one example each.
  const dist::DistEnv env = dist::dist_env();
  MF_CHECK(opts.pair_shards >= 1 && env.world % opts.pair_shards == 0, "--pair-shards ", opts.pair_shards,
           " must divide the number of ranks (", env.world, ")");
  MF_CHECK(cfg.data.crop_size % opts.pair_shards == 0, "--pair-shards ", opts.pair_shards,
           " must divide data.crop_size (", cfg.data.crop_size, "): each rank holds an equal block of pair rows");
  data_rank = env.rank / opts.pair_shards, data_world = env.world / opts.pair_shards;
  device = resolve_device(cfg.device);
  if (device.is_cuda() && env.world > 1) device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  make_current(device);
  // On GPUs the gradients and the pair shards travel over NCCL, on the CPU over Gloo.
  if (env.world > 1) dp_ = std::make_unique<dist::ProcessGroup>(env, device);
  if (opts.pair_shards > 1) pairs_ = dp_->split(opts.pair_shards);
  lead = env.rank == 0, quiet = opts.quiet || !lead;
  autocast = device.is_cuda() && cfg.bf16;
  at::set_num_threads(cfg.threads > 0 ? static_cast<int>(cfg.threads)
                                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  out_dir = opts.out_dir;
  ckpt_dir = out_dir / "checkpoints";
  fs::create_directories(out_dir);
  if (lead) lock_.emplace(out_dir);

  ds = data::load_dataset(cfg.data.dir, quiet, cfg.data.overfit, cfg.data.split);
  if (!cfg.data.weights.empty()) data::load_weights(ds, cfg.data.weights);
  if (!cfg.data.clusters.empty()) data::load_clusters(ds, cfg.data.clusters, quiet);
  {
    std::ostringstream os;
    os << "data: " << ds.train.size() << " train, " << ds.validation.size() << " validation entries from "
       << cfg.data.dir << " (" << ds.skipped.size() << " files skipped)";
    say(os.str());
  }
  if (cfg.data.sampling == "af3") say(data::use_af3_sampling(ds, cfg.data.chain_clusters, quiet).describe());
  if (cfg.model.templates.n_blocks > 0 && cfg.data.max_templates > 0 && lead) report_templates(ds);

  at::manual_seed(cfg.seed);  // parameter initialisation only; all later randomness is seeded
  model_ = model::MegaFold(cfg.model);
  model_->to(device);
  params_ = model_->parameters();
  optimizer_ = std::make_unique<torch::optim::AdamW>(params_, adamw_options(cfg.optim));
  ema_ = std::make_unique<Ema>(params_, cfg.optim.ema_decay);

  const auto existing = latest_checkpoint(ckpt_dir.string());
  if (opts.resume && existing) {
    // The newest checkpoint that is whole: a damaged one (checksum, unreadable) is named on
    // stderr (also under --quiet) and the one before it tried. A config mismatch is no damage:
    // it stops the resume.
    std::string reasons;
    for (const std::string& path : checkpoints_newest_first(ckpt_dir.string())) {
      std::optional<config::TrainConfig> saved;
      try {
        saved = config::parse_config(read_checkpoint_meta(path).config_json, path);
      } catch (const Error& ex) {
        if (lead) std::cerr << "warning: " << ex.what() << "; trying the checkpoint before it" << std::endl;
        reasons += std::string("\n  ") + ex.what();
        continue;
      }
      const std::string diff = config::resume_mismatch(*saved, cfg);
      MF_CHECK(diff.empty(), "cannot resume from ", path, ": the run was started with other ",
               "settings (", diff, "); resume with the original config or start a new --out");
      if (saved->model.memory != cfg.model.memory)
        say("warning: resuming under memory mode " + cfg.model.memory + " (the run used " + saved->model.memory +
            "): the bf16 block boundary of balanced/frontier differs from fast, so the numerics move; "
            "same-mode resumes are bitwise");
      try {
        start = load_checkpoint(path, *model_, ema_->shadow(), *optimizer_).step;
      } catch (const Error& ex) {
        if (lead) std::cerr << "warning: " << ex.what() << "; trying the checkpoint before it" << std::endl;
        reasons += std::string("\n  ") + ex.what();
        continue;
      }
      say("resume: " + path + " (step " + std::to_string(start) + ")");
      reasons.clear();
      break;
    }
    MF_CHECK(reasons.empty(), "--resume: no usable checkpoint in ", ckpt_dir.string(), ":", reasons,
             "\nmove the damaged files away to start this run from step 0");
  } else if (opts.resume) {
    say("resume: no checkpoint in " + ckpt_dir.string() + ", starting from step 0");
  } else {
    MF_CHECK(!existing, "--out ", out_dir.string(), " already holds checkpoints of another run (",
             *existing, "); pass --resume to continue it or choose another --out");
  }
  if (!opts.init.empty() && start == 0) {
    initialise_from(opts.init);
    say("init: weights and their EMA from " + opts.init);
  } else if (!opts.init.empty()) {
    say("init: " + opts.init + " not used: resuming this run at step " + std::to_string(start));
  }
  if (lead) write_file_atomically((out_dir / "config.json").string(), config::to_json(cfg));
  say("resolved config (saved as " + (out_dir / "config.json").string() + "):\n" + config::to_json(cfg));
  if (lead) metrics_.emplace((out_dir / "metrics.jsonl").string(), opts.resume ? start : -1);
  if (dp_)
    say("data parallel: " + std::to_string(data_world) + " groups of " + std::to_string(opts.pair_shards) +
        (opts.pair_shards > 1 ? " ranks sharding the pair representation by rows" : " rank") + " (" + dp_->backend() +
        "), " + std::to_string(cfg.data.batch_size) + " examples per group and step");
  // The sum of every rank's gradients, divided so that each parameter gets the mean over the
  // data-parallel groups: row-sharded parameters' rank shares add up to their group's gradient,
  // replicated ones are the same on all ranks of a group.
  std::vector<double> grad_divisors(params_.size(), static_cast<double>(env.world));
  {
    std::unordered_set<const void*> rows;
    if (pairs_)
      for (const at::Tensor& p : model_->row_parameters()) rows.insert(p.unsafeGetTensorImpl());
    for (size_t i = 0; i < params_.size(); ++i)
      if (rows.count(params_[i].unsafeGetTensorImpl())) grad_divisors[i] = data_world;
  }
  // Summed in buckets while backward runs (dist/grad_sync.h).
  MF_CHECK(opts.bucket_mb > 0, "--bucket-mb must be > 0, got ", opts.bucket_mb);
  if (dp_) grad_sync_.emplace(*dp_, params_, grad_divisors, static_cast<int64_t>(opts.bucket_mb * (1 << 20)) + 1);

  int64_t n_params = 0;
  for (const auto& p : params_) n_params += p.numel();
  say("model: " + std::to_string(cfg.model.n_blocks) + " Pairformer blocks, " + std::to_string(n_params) +
      " parameters; device " + device.str() + (autocast ? " (bf16 autocast)" : " (fp32)") + "; config " + cfg.name);
  say(model::memory_plan(cfg.model).describe());
}

void Run::initialise_from(const std::string& path) {
  CheckpointReader reader(path);
  // Each weight set into a model on the host (a checkpoint holds host tensors), then copied
  // into the run's, on its device: one after the other, because a model loaded from the
  // archive shares the archive's tensors, which the EMA load then overwrites.
  at::NoGradGuard no_grad;
  model::MegaFold host(cfg.model);
  for (const bool ema : {false, true}) {
    reader.load_weights(*host, ema);
    const auto loaded = host->named_parameters();
    MF_CHECK(loaded.size() == params_.size(), "--init ", path, ": ", loaded.size(), " parameters, this model has ",
             params_.size());
    for (size_t k = 0; k < params_.size(); ++k) {
      MF_CHECK(loaded[k].value().sizes() == params_[k].sizes(), "--init ", path, ": ", loaded[k].key(), " is ",
               loaded[k].value().sizes(), " there and ", params_[k].sizes(), " in this run's model (",
               "a checkpoint of a model with other shapes)");
      (ema ? ema_->shadow()[k] : params_[k]).copy_(loaded[k].value());
    }
  }
  // Buffers too: the diffusion module's random Fourier features are part of the model.
  const auto from = host->named_buffers(), to = model_->named_buffers();
  MF_CHECK(from.size() == to.size(), "--init ", path, ": ", from.size(), " buffers, this model has ", to.size());
  for (size_t k = 0; k < to.size(); ++k) {
    MF_CHECK(from[k].value().sizes() == to[k].value().sizes(), "--init ", path, ": buffer ", from[k].key(), " is ",
             from[k].value().sizes(), " there and ", to[k].value().sizes(), " in this run's model");
    to[k].value().copy_(from[k].value());
  }
}

StepOutcome Run::step(const data::Batch& batch, int64_t step, double lr, Progress& progress) {
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  StepOutcome s;
  try {
    {
      AutocastScope ac(at::kCUDA, autocast, at::kBFloat16);
      // AF3 trains with 1..N_cycle trunk passes, drawn per step.
      const int64_t cycles = 1 + static_cast<int64_t>(mix_seed(cfg.seed ^ kRecycleSalt, step) %
                                                      static_cast<uint64_t>(cfg.model.recycles));
      const model::TrunkOutput out = model_->forward(batch, mix_seed(cfg.seed ^ kDropoutSalt, step), cycles, pairs_.get());
      const bool confidence = model_->has_confidence() && step % cfg.model.confidence.every == 0;
      s.loss = model_->loss(batch, out, mix_seed(cfg.seed ^ kNoiseSalt, step), confidence);
    }
    if (grad_sync_) grad_sync_->prepare();
    s.loss.total.backward();
    if (grad_sync_) grad_sync_->finish();
    s.grad_norm = clip_gradients(params_, cfg.optim);
    // The mean over the ranks: what is logged, and one finiteness verdict for all of them.
    s.loss_value = dp_ ? dp_->average(s.loss.total.item<double>()) : s.loss.total.item<double>();
    if (s.loss.plddt.defined())
      last_confidence_ = {s.loss.plddt.item<double>(), s.loss.pae.item<double>(), s.loss.pde.item<double>(),
                          s.loss.resolved.item<double>(), s.loss.plddt_target.item<double>(),
                          s.loss.rollout_mirrored.item<double>()};
    s.finite = std::isfinite(s.loss_value) && std::isfinite(s.grad_norm);
    if (s.finite) {
      optimizer_->step();
      ema_->update(params_);
      skipped_in_row = 0;
    } else {
      ++skipped_total, ++skipped_in_row;
      std::string entries;
      for (const std::string& name : batch.names) entries += (entries.empty() ? "" : ", ") + name;
      if (!quiet)
        progress.message("warning: step " + std::to_string(step + 1) + " has a non-finite loss or gradient (" +
                         (std::isfinite(s.loss_value) ? "gradient norm " : "loss ") +
                         std::to_string(std::isfinite(s.loss_value) ? s.grad_norm : s.loss_value) + "; entries " +
                         entries + "); update skipped (" + std::to_string(skipped_in_row) + " in a row)");
      MF_CHECK(cfg.max_skipped_steps == 0 || skipped_in_row < cfg.max_skipped_steps, skipped_in_row,
               " steps in a row (the last ", step + 1, ", entries ", entries,
               ") had a non-finite loss or gradient; stopping (max_skipped_steps). The last checkpoint holds the ",
               "weights before them: lower optim.lr, check these entries, or resume with --set max_skipped_steps=0");
    }
  } catch (const c10::OutOfMemoryError&) {
    // Checkpoints are written between steps only, so the newest one is whole.
    throw Error(out_of_memory_advice(cfg, step + 1, device, latest_checkpoint(ckpt_dir.string())));
  }
  optimizer_->zero_grad();
  synchronize(device);
  return s;
}

void Run::log(int64_t step, const StepOutcome& s, const data::Batch& batch, double lr, double ms,
              double data_wait_ms) {
  if (!metrics_) return;
  std::map<std::string, double> fields = {
      {"loss", s.loss_value},
      {"distogram_loss", s.loss.distogram.item<double>()},
      {"distogram_accuracy", s.loss.distogram_accuracy.item<double>()},
      {"lr", lr},
      {"grad_norm", s.grad_norm},
      {"tokens_per_s", static_cast<double>(batch.real_tokens()) / (ms / 1e3)},
      {"step_ms", ms},
      {"data_wait_ms", data_wait_ms},
      {"peak_memory_gb", peak_memory_gb(device)},
      {"skipped", s.finite ? 0.0 : 1.0},
      {"skipped_total", static_cast<double>(skipped_total)}};
  if (grad_sync_) {  // how much of the gradient all-reduce ran while backward did
    fields["grad_buckets"] = static_cast<double>(grad_sync_->buckets());
    fields["grad_buckets_during_backward"] = static_cast<double>(grad_sync_->launched_during_backward());
    fields["grad_buckets_late"] = static_cast<double>(grad_sync_->late_buckets());
  }
  if (s.loss.diffusion_mse.defined()) {
    fields["diffusion_mse"] = s.loss.diffusion_mse.item<double>();
    fields["smooth_lddt_loss"] = s.loss.smooth_lddt.item<double>();
    fields["bond_loss"] = s.loss.bond.item<double>();
  }
  // The head trains every confidence.every steps: log its latest values.
  if (last_confidence_) {
    fields["plddt_loss"] = last_confidence_->plddt;
    fields["pae_loss"] = last_confidence_->pae;
    fields["pde_loss"] = last_confidence_->pde;
    fields["resolved_loss"] = last_confidence_->resolved;
    fields["rollout_lddt"] = last_confidence_->rollout_lddt;
    fields["rollout_mirrored"] = last_confidence_->rollout_mirrored;
  }
  metrics_->write("train", step, fields);
}

void Run::validate(int64_t step, Progress& progress) {
  if (ds.validation.empty() || !lead) return;
  ema_->swap(params_);
  const Validation v = train::validate(model_, ds, cfg, device, autocast);
  ema_->swap(params_);
  std::map<std::string, double> fields = {{"distogram_loss", v.loss}, {"distogram_accuracy", v.accuracy}, {"pairs", v.pairs}};
  if (v.structures > 0) {
    fields["lddt_ca"] = v.lddt_ca;
    fields["lddt_all_atom"] = v.lddt_all;
    fields["mirrored"] = v.mirrored;
    for (int t = 0; t < data::kNumMolTypes; ++t)  // lddt_protein, lddt_rna, lddt_dna, lddt_ligand
      if (v.type_entries[t] > 0)
        fields["lddt_" + std::string(data::mol_type_name(static_cast<data::MolType>(t)))] = v.lddt_type[t];
    if (model_->has_confidence()) {
      fields["plddt"] = v.plddt;
      fields["ptm"] = v.ptm;
      fields["mean_pae"] = v.mean_pae;
      if (v.multichain > 0) fields["iptm"] = v.iptm;
    }
  }
  metrics_->write("validation", step, fields);
  char line[240];
  std::snprintf(line, sizeof(line), "validation step %lld: distogram loss %.4f accuracy %.4f", static_cast<long long>(step),
                v.loss, v.accuracy);
  std::string text = line;
  if (v.structures > 0) {
    std::snprintf(line, sizeof(line), "; sampled structures: lDDT-CA %.4f, all-atom lDDT %.4f, mirror images %.0f%%",
                  v.lddt_ca, v.lddt_all, 100 * v.mirrored);
    text += line;
    if (model_->has_confidence()) {
      std::snprintf(line, sizeof(line), ", mean pLDDT %.1f, pTM %.3f, mean PAE %.2f A", v.plddt, v.ptm, v.mean_pae);
      text += line;
    }
  }
  text += " (EMA weights)";
  if (!quiet) progress.message(text);
}

void Run::checkpoint(int64_t step) {
  if (!lead) return;
  const CheckpointMeta meta{step, cfg.seed, config::to_json(cfg)};
  save_checkpoint(ckpt_dir.string(), meta, *model_, ema_->shadow(), *optimizer_, cfg.keep_checkpoints);
}

bool Run::stop_requested() {
  // The same answer on every rank (a rank leaving alone would leave the others waiting in a
  // collective).
  return dp_ ? dp_->average(g_stop_requested ? 1.0 : 0.0) > 0 : static_cast<bool>(g_stop_requested);
}

}  // namespace

TrainResult run_training(const config::TrainConfig& cfg_in, const TrainOptions& opts) {
  Run run(cfg_in, opts);
  const config::TrainConfig& cfg = run.cfg;
  TrainResult result;
  std::vector<double> losses, step_ms;
  Progress progress(run.start, cfg.steps);
  StopSignals signals;

  reset_peak_memory(run.device);
  // Batches are built ahead on loader threads; batch k depends on (seed, k) only.
  data::BatchPrefetcher batches(
      [&](int64_t k) { return training_batch(run.ds, cfg, cfg.seed, k, run.data_rank, run.data_world); }, run.start,
      cfg.steps, static_cast<int>(cfg.data.workers), static_cast<int>(cfg.data.prefetch), run.device.is_cuda());
  data::DeviceBatches device_batches(batches, run.device, cfg.steps - run.start);
  int64_t step = run.start;
  bool stopped = false;
  while (step < cfg.steps && !(stopped = run.stop_requested())) {
    const auto t0 = std::chrono::steady_clock::now();
    const double waited = batches.wait_seconds();
    const data::Batch batch = device_batches.next();
    const double data_wait_ms = (batches.wait_seconds() - waited) * 1e3;
    const double lr = learning_rate(cfg.optim, step);
    const StepOutcome s = run.step(batch, step, lr, progress);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++step;
    losses.push_back(s.loss_value);
    step_ms.push_back(ms);

    const bool log_now = step % cfg.log_every == 0 || step == cfg.steps;
    if (log_now) run.log(step, s, batch, lr, ms, data_wait_ms);
    if (!run.quiet) {
      const size_t w = std::min<size_t>(step_ms.size(), 20);
      const double recent_ms = mean(step_ms, step_ms.size() - w, step_ms.size());
      progress.update(step, s.loss_value, lr, 1e3 / recent_ms, log_now);
    }
    if (cfg.val_every > 0 && step % cfg.val_every == 0 && step != cfg.steps) run.validate(step, progress);
    if (step % cfg.checkpoint_every == 0 && step != cfg.steps) run.checkpoint(step);
  }
  if (stopped && !run.quiet) progress.message("stop requested: writing a checkpoint");
  if (step > run.start || stopped) run.checkpoint(step);
  if (step == cfg.steps && step > run.start && cfg.val_every >= 0) run.validate(step, progress);
  if (!run.quiet) progress.finish();

  result.steps_done = step - run.start;
  const size_t n = losses.size(), window = std::max<size_t>(1, n / 10);
  result.first_loss = mean(losses, 0, std::min(window, n));
  result.last_loss = mean(losses, n - std::min(window, n), n);
  if (step_ms.size() > 1) {
    std::vector<double> sorted(step_ms.begin() + 1, step_ms.end());  // first step warms up
    std::sort(sorted.begin(), sorted.end());
    result.step_ms = sorted[sorted.size() / 2];
  } else if (!step_ms.empty()) {
    result.step_ms = step_ms[0];
  }
  result.peak_gb = peak_memory_gb(run.device);
  result.skipped_steps = run.skipped_total;
  result.stopped = stopped;
  return result;
}

}  // namespace megafold::train
