#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>

#include "core/check.h"
#include "data/cache.h"

namespace megafold::data {

bool is_validation_entry(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return fnv1a32(lower) % 10 == 0;
}

const Entry& Dataset::sample(uint64_t seed, uint64_t g) const {
  MF_CHECK(!train.empty(), "dataset has no training entries");
  if (!cumulative_weights.empty()) {
    // Inverse-CDF draw from the top 53 bits of a seeded hash: no generator state to carry.
    const double u = static_cast<double>(mix_seed(seed ^ 0x77656967, g) >> 11) * 0x1.0p-53 * cumulative_weights.back();
    const size_t i = std::upper_bound(cumulative_weights.begin(), cumulative_weights.end(), u) - cumulative_weights.begin();
    return train[std::min(i, train.size() - 1)];
  }
  const uint64_t n = train.size();
  const uint64_t epoch = g / n;
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  // Fisher-Yates with our own generator: std::shuffle's algorithm is library-defined.
  std::mt19937_64 rng(mix_seed(seed, epoch));
  for (uint64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
  return train[perm[g % n]];
}

std::vector<std::string> list_structure_files(const std::string& dir) {
  MF_CHECK(std::filesystem::is_directory(dir), "data directory '", dir,
           "' does not exist; pass --data DIR with mmCIF/PDB files (e.g. data/pdb)");
  std::vector<std::string> paths;
  try {
    for (const auto& it : std::filesystem::recursive_directory_iterator(
             dir, std::filesystem::directory_options::skip_permission_denied))
      if (it.is_regular_file() && is_structure_file(it.path().string()))
        paths.push_back(it.path().string());
  } catch (const std::filesystem::filesystem_error& ex) {
    throw Error("cannot list data directory '" + dir + "': " + ex.what());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

Dataset load_dataset(const std::string& dir, bool quiet, bool overfit) {
  Dataset ds;
  auto add = [&](Entry e) { (!overfit && is_validation_entry(e.name) ? ds.validation : ds.train).push_back(std::move(e)); };
  auto skip = [&](const std::string& why) {
    ds.skipped.push_back(why);
    if (!quiet) std::cerr << "warning: skipping " << why << "\n";
  };
  size_t found = 0;
  if (is_cache_dir(dir)) {  // a feature cache (megafold cache): no parsing
    CacheEntries cache = read_cache(dir);
    found = cache.entries.size() + cache.skipped.size();
    for (Entry& e : cache.entries) add(std::move(e));
    for (const std::string& why : cache.skipped) skip(why);
  } else {
    const std::vector<std::string> paths = list_structure_files(dir);
    found = paths.size();
    for (const std::string& p : paths) {
      try {
        Entry e = load_entry(p);
        if (!quiet)
          for (const std::string& w : e.warnings) std::cerr << "warning: " << w << "\n";
        add(std::move(e));
      } catch (const std::exception& ex) {
        skip(ex.what());
      }
    }
  }
  MF_CHECK(!ds.train.empty(), "no usable training structure under '", dir, "' (", found,
           " structure files or cache entries found, ", ds.skipped.size(), " skipped)");
  if (overfit) ds.validation = ds.train;
  return ds;
}

void warn_replaced_sample(const Entry& e, uint64_t g, const std::exception& why) {
  std::cerr << "warning: sample " << g << " (entry " << e.name << ") failed, replaced by another draw: " << why.what()
            << "\n";
}

void load_weights(Dataset& ds, const std::string& path) {
  std::ifstream in(path);
  MF_CHECK(in.good(), path, ": cannot read sampling weights");
  std::map<std::string, double> by_name;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    double w = -1;
    try {
      size_t used = 0;
      if (tab != std::string::npos) w = std::stod(line.substr(tab + 1), &used);
      if (tab == std::string::npos || used != line.size() - tab - 1) w = -1;
    } catch (const std::exception&) {
      w = -1;
    }
    MF_CHECK(w >= 0 && std::isfinite(w), path, ":", line_no, ": expected 'entry<TAB>weight' with a weight >= 0, got '",
             line, "'");
    by_name[line.substr(0, tab)] = w;
  }
  ds.cumulative_weights.clear();
  double total = 0;
  for (const Entry& e : ds.train) {
    auto it = by_name.find(e.name);
    MF_CHECK(it != by_name.end(), path, ": no weight for training entry '", e.name, "'");
    total += it->second;
    ds.cumulative_weights.push_back(total);
  }
  MF_CHECK(total > 0, path, ": every training entry has weight 0");
}

}  // namespace megafold::data
