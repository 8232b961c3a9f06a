#include "data/dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
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

std::vector<std::string> list_structure_files(const std::string& dir, std::vector<std::string>* passed_over) {
  namespace fs = std::filesystem;
  MF_CHECK(fs::is_directory(dir), "data directory '", dir,
           "' does not exist; pass --data DIR with mmCIF/PDB files (e.g. data/pdb)");
  std::vector<std::string> paths, skipped;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  MF_CHECK(!ec, "cannot list data directory '", dir, "': ", ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    MF_CHECK(!ec, "cannot list data directory '", dir, "': ", ec.message());
    const std::string s = it->path().string();
    std::error_code lec, sec;
    const bool link = it->is_symlink(lec);
    const fs::file_status target = it->status(sec);  // follows links
    if (link && sec) {
      if (is_structure_file(s))
        skipped.push_back(s + ": symbolic link that is dangling or loops (" + sec.message() + "); skipped");
      continue;
    }
    if (fs::is_directory(target)) {
      if (link) skipped.push_back(s + ": symbolic link to a directory, not followed; skipped");
      else if (::access(s.c_str(), R_OK | X_OK) != 0)  // the iterator passes over it silently
        skipped.push_back(s + ": cannot read the directory (" + std::strerror(errno) + "); skipped");
      continue;
    }
    if (!is_structure_file(s)) continue;
    if (!fs::is_regular_file(target)) {
      skipped.push_back(s + ": not a regular file (a FIFO, socket or device); skipped");
    } else if (s.find_first_of("\t\n\r") != std::string::npos) {
      std::string shown = s;
      std::replace_if(shown.begin(), shown.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, '?');
      skipped.push_back(shown + ": the file name holds a tab or newline (shown as ?); rename it; skipped");
    } else {
      paths.push_back(s);
    }
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& why : skipped) {
    if (passed_over) passed_over->push_back(why);
    else std::cerr << "warning: " << why << "\n";
  }
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
    std::vector<std::string> passed_over;
    const std::vector<std::string> paths = list_structure_files(dir, &passed_over);
    for (const std::string& why : passed_over) skip(why);
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
