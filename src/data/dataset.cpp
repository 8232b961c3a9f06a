#include "data/dataset.h"

#include <algorithm>
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
        add(load_entry(p));
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

}  // namespace megafold::data
