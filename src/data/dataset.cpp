#include "data/dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "core/check.h"
#include "core/parallel.h"
#include "data/cache.h"

namespace megafold::data {

bool is_validation_entry(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return fnv1a32(lower) % 10 == 0;
}

namespace {

// Position `x` of a permutation of [0, n) keyed by `key`, in O(1) expected time and no table:
// a 4-round Feistel network over the smallest domain of 4^k >= n values (a bijection of that
// domain), walked until the image falls inside [0, n) (cycle walking: still a bijection of
// [0, n), and at most 4 expected rounds since the domain is < 4n).
uint64_t permuted(uint64_t x, uint64_t n, uint64_t key) {
  int half = 1;
  while (half < 32 && (uint64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  do {
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t next = l ^ (mix_seed(key + round, r) & mask);
      l = r;
      r = next;
    }
    x = (l << half) | r;
  } while (x >= n);
  return x;
}

}  // namespace

std::shared_ptr<const Entry> EntryRef::get() const {
  if (entry_) return entry_;
  auto e = std::make_shared<Entry>(read_entry_file(file_));
  MF_CHECK(e->name == name_, file_, ": holds entry '", e->name, "', the cache index says '", name_, "'");
  return e;
}

Draw Dataset::draw(uint64_t seed, uint64_t g) const {
  MF_CHECK(!train.empty(), "dataset has no training entries");
  // Inverse-CDF draw from the top 53 bits of a seeded hash: no generator state to carry. Units
  // and entries hash with different salts, so neither stream is a relabelling of the other.
  auto weighted = [&](uint64_t salt, size_t count) {
    const double u = static_cast<double>(mix_seed(seed ^ salt, g) >> 11) * 0x1.0p-53 * cumulative_weights.back();
    const size_t i = std::upper_bound(cumulative_weights.begin(), cumulative_weights.end(), u) - cumulative_weights.begin();
    return std::min(i, count - 1);
  };
  if (!units.empty()) {
    const SamplingUnit& unit = units[weighted(0x756e6974, units.size())];  // "unit"
    return {unit.entry, unit.focus};
  }
  if (!cumulative_weights.empty()) return {weighted(0x77656967, train.size()), {}};
  const uint64_t n = train.size();
  return {permuted(g % n, n, mix_seed(seed, g / n)), {}};
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

std::map<std::string, bool> read_split(const std::string& path) {
  std::ifstream in(path);
  MF_CHECK(in.good(), path, ": cannot read the split file");
  std::map<std::string, bool> validation;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || (line_no == 1 && line == "entry\tsplit")) continue;  // comments, header
    const auto tab = line.find('\t');
    const std::string name = line.substr(0, tab), which = tab == std::string::npos ? "" : line.substr(tab + 1);
    MF_CHECK(!name.empty() && (which == "train" || which == "validation"), path, ":", line_no,
             ": expected 'entry<TAB>train' or 'entry<TAB>validation', got '", line, "'");
    MF_CHECK(validation.emplace(name, which == "validation").second, path, ":", line_no, ": entry '", name,
             "' is listed twice");
  }
  return validation;
}

Dataset load_dataset(const std::string& dir, bool quiet, bool overfit, const std::string& split_file) {
  Dataset ds;
  const std::map<std::string, bool> split = split_file.empty() ? std::map<std::string, bool>{} : read_split(split_file);
  size_t by_rule = 0;
  auto is_validation = [&](const std::string& name) {
    if (auto it = split.find(name); it != split.end()) return it->second;
    ++by_rule;
    return is_validation_entry(name);
  };
  auto add = [&](EntryRef e) {
    (!overfit && is_validation(e.name()) ? ds.validation : ds.train).push_back(std::move(e));
  };
  auto skip = [&](const std::string& why) {
    ds.skipped.push_back(why);
    if (!quiet) std::cerr << "warning: skipping " << why << "\n";
  };
  size_t found = 0;
  if (is_cache_dir(dir)) {  // a feature cache (megafold cache): no parsing
    // The index only: entries are mapped and decoded when sampled (EntryRef).
    const std::vector<CacheIndexRow> rows = read_cache_index(dir);
    // What the cache's build left out (inputs it skipped, MSAs it could not use): said once.
    if (std::ifstream notes(std::filesystem::path(dir) / "skipped.tsv"); notes && !quiet) {
      int64_t rows = -1;  // the header
      for (std::string line; std::getline(notes, line);) rows += !line.empty();
      if (rows > 0)
        std::cerr << "warning: the build of cache " << dir << " left out " << rows
                  << " inputs or MSAs; reasons in " << (std::filesystem::path(dir) / "skipped.tsv").string() << "\n";
    }
    found = rows.size();
    for (const CacheIndexRow& row : rows) add(EntryRef(row.name, row.path));
    ds.cache_dir = dir;
  } else {
    std::vector<std::string> passed_over;
    const std::vector<std::string> paths = list_structure_files(dir, &passed_over);
    for (const std::string& why : passed_over) skip(why);
    found = paths.size();
    // Parsed on every core, kept in path order (the order, hence the sample stream, does not
    // depend on the thread count); progress every few seconds for large trees.
    std::vector<std::optional<Entry>> entries(paths.size());
    std::vector<std::string> errors(paths.size());
    parallel_for(
        paths.size(),
        [&](size_t i) {
          try {
            entries[i] = load_entry(paths[i]);
          } catch (const std::exception& ex) {
            errors[i] = ex.what();
          }
        },
        [&](size_t done) {
          if (!quiet) std::cerr << "indexing " << dir << ": " << done << " / " << paths.size() << " files" << std::endl;
        });
    for (size_t i = 0; i < paths.size(); ++i) {
      if (!entries[i]) {
        skip(errors[i]);
        continue;
      }
      if (!quiet)
        for (const std::string& w : entries[i]->warnings) std::cerr << "warning: " << w << "\n";
      add(EntryRef(std::move(*entries[i])));
    }
  }
  if (!split.empty() && by_rule > 0 && !quiet)
    std::cerr << "warning: " << by_rule << " entries are not in " << split_file
              << "; the name rule placed them (data/README.md)\n";
  MF_CHECK(!ds.train.empty(), "no usable training structure under '", dir, "' (", found,
           " structure files or cache entries found, ", ds.skipped.size(), " skipped)");
  if (overfit) ds.validation = ds.train;
  return ds;
}

void warn_replaced_sample(const std::string& name, uint64_t g, const std::exception& why) {
  std::cerr << "warning: sample " << g << " (entry " << name << ") failed, replaced by another draw: " << why.what()
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
  ds.units.clear();
  ds.cumulative_weights.clear();
  double total = 0;
  for (const EntryRef& e : ds.train) {
    auto it = by_name.find(e.name());
    MF_CHECK(it != by_name.end(), path, ": no weight for training entry '", e.name(), "'");
    total += it->second;
    ds.cumulative_weights.push_back(total);
  }
  MF_CHECK(total > 0, path, ": every training entry has weight 0");
}

void load_clusters(Dataset& ds, const std::string& path, bool quiet) {
  std::ifstream in(path);
  MF_CHECK(in.good(), path, ": cannot read the cluster file");
  std::map<std::string, std::string> cluster_of;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    MF_CHECK(tab != std::string::npos && tab > 0 && tab + 1 < line.size(), path, ":", line_no,
             ": expected 'entry<TAB>cluster', got '", line, "'");
    MF_CHECK(cluster_of.emplace(line.substr(0, tab), line.substr(tab + 1)).second, path, ":", line_no, ": entry '",
             line.substr(0, tab), "' is listed twice");
  }
  std::map<std::string, int64_t> size;  // training entries per cluster
  std::vector<std::string> clusters;
  size_t unlisted = 0;
  for (const EntryRef& e : ds.train) {
    auto it = cluster_of.find(e.name());
    if (it == cluster_of.end()) ++unlisted;
    clusters.push_back(it == cluster_of.end() ? "\x01" + e.name() : it->second);  // its own cluster
    ++size[clusters.back()];
  }
  if (unlisted > 0 && !quiet)
    std::cerr << "warning: " << unlisted << " training entries are not in " << path << "; each is a cluster of its own\n";
  ds.units.clear();
  ds.cumulative_weights.clear();
  double total = 0;
  for (const std::string& c : clusters) {
    total += 1.0 / static_cast<double>(size[c]);
    ds.cumulative_weights.push_back(total);
  }
}

}  // namespace megafold::data
