// `megafold dev loader`: how fast the loader turns inputs into training batches, per sample from
// raw structure files (parse every time) or from a feature cache as training reads it (the
// index at start, each entry memory-mapped and decoded when sampled), with the start-up time
// and the resident memory after start and after the samples.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/args.h"
#include "core/check.h"
#include "core/seed.h"
#include "data/cache.h"
#include "data/crop.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampling.h"

namespace megafold::cli {
namespace {

// This process's resident memory (VmRSS), in GB.
double resident_gb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024.0 / 1e9;  // kB
  return 0.0;
}

}  // namespace

int loader_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"data", "DIR", "structure files (parsed per sample) or a feature cache (mapped per sample)"},
      {"crop", "N", "crop size in tokens (default 384)"},
      {"samples", "K", "samples to build (default 200)"},
      {"workers", "N", "loader threads (default 2)"},
      {"seed", "N", "sample stream seed (default 0)"},
      {"msa-rows", "N", "MSA rows drawn per sample, the query included (default 128)"},
      {"max-templates", "N", "templates per chain drawn per sample as training draws them (default 4)"},
      {"sampling", "entry|af3", "what a sample of a cache draws, as data.sampling (default entry); af3 adds its "
                                "start-up (units.tsv, or decoding the entries) to startup_s"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("dev loader",
                       "Measure loader throughput: each sample reads its entry (parsing a structure file, or "
                       "memory-mapping a cache entry), draws the AF3 crop mix and builds a padded batch, on "
                       "--workers threads ahead of a consumer that only takes them. Prints samples/s.",
                       specs);
    return 0;
  }
  MF_CHECK(args.has("data"), "--data is required (see --help)");
  const std::string dir = *args.get("data");
  const bool cached = data::is_cache_dir(dir);
  const std::string sampling = args.get("sampling").value_or("entry");
  MF_CHECK(sampling == "entry" || sampling == "af3", "--sampling must be entry or af3, got '", sampling, "'");
  MF_CHECK(sampling == "entry" || cached, "--sampling af3 needs a feature cache as --data (megafold cache)");
  const double rss_before = resident_gb();
  const auto t_start = std::chrono::steady_clock::now();
  std::optional<data::Dataset> ds;  // a cache: as training loads it (the index only)
  std::vector<std::string> files;   // raw files: parsed per sample
  if (cached) ds = data::load_dataset(dir, /*quiet=*/true, /*overfit=*/true);
  else files = data::list_structure_files(dir);
  if (sampling == "af3") data::use_af3_sampling(*ds, "", /*quiet=*/true);
  const double startup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const double rss_start = resident_gb();
  MF_CHECK(cached || !files.empty(), "no entries under ", dir);
  const int crop = static_cast<int>(args.get_int("crop", 384));
  const int64_t samples = args.get_int("samples", 200);
  const int workers = static_cast<int>(args.get_int("workers", 2));
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0));
  const int64_t msa_rows = args.get_int("msa-rows", 128);
  const int64_t max_templates = args.get_int("max-templates", 4);
  MF_CHECK(crop > 0 && samples > 0 && workers > 0 && msa_rows > 0,
           "--crop, --samples, --workers and --msa-rows must be > 0");
  MF_CHECK(max_templates >= 0, "--max-templates must be >= 0");
  auto make = [&](int64_t k) {
    // Sample k's entry, crop, MSA rows and templates, each from its own seed derived from (seed, k).
    const uint64_t s = mix_seed(seed, static_cast<uint64_t>(k));
    if (cached) {
      const auto [e, tokens] = data::sample_or_replace(
          *ds, seed, static_cast<uint64_t>(k), [&](const data::Entry& x, uint64_t, const data::CropFocus& focus) {
            return data::training_crop(x, crop, {}, mix_seed(s, 1), focus);
          });
      return data::make_batch({e.get()}, {tokens}, crop, {msa_rows, mix_seed(s, 2)}, {max_templates, true, mix_seed(s, 3)});
    }
    const data::Entry e = data::load_entry(files[s % files.size()]);
    const auto tokens = data::training_crop(e, crop, {}, mix_seed(s, 1));
    return data::make_batch({&e}, {tokens}, crop, {msa_rows, mix_seed(s, 2)}, {max_templates, true, mix_seed(s, 3)});
  };
  const auto t0 = std::chrono::steady_clock::now();
  {
    data::BatchPrefetcher batches(make, 0, samples, workers, 2 * workers, false);
    for (int64_t k = 0; k < samples; ++k) batches.next();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t entries = cached ? ds->train.size() : files.size();
  std::printf("{\"mode\": \"%s\", \"sampling\": \"%s\", \"entries\": %zu, \"crop\": %d, \"samples\": %lld, "
              "\"workers\": %d, \"seconds\": %.4f, \"samples_per_s\": %.2f, \"startup_s\": %.4f, "
              "\"rss_before_gb\": %.4f, \"rss_start_gb\": %.4f, \"rss_after_gb\": %.4f}\n",
              cached ? "cache" : "raw", sampling.c_str(), entries, crop, static_cast<long long>(samples), workers, seconds,
              static_cast<double>(samples) / seconds, startup_s, rss_before, rss_start, resident_gb());
  return 0;
}

}  // namespace megafold::cli
