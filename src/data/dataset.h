#pragma once
// The bundled-structure dataset: a directory of structure files, a fixed split by entry and
// a seed-deterministic sample stream.
//
// Split rule (documented in data/README.md): an entry is in validation iff
// fnv1a32(lowercase entry name) % 10 == 0. It depends on the name only, so it never moves
// when entries are added or removed.
//
// Sample stream: global sample index g -> (epoch = g / n, position = g % n) -> entry
// perm(seed, epoch)[position]. Every random choice downstream (crop) is seeded from
// (seed, g) as well, so the stream is a pure function of (seed, g): resume needs only g.
#include <cstdint>
#include <string>
#include <vector>

#include "core/seed.h"
#include "data/structure.h"

namespace megafold::data {

bool is_validation_entry(const std::string& name);

struct Dataset {
  std::vector<Entry> train;
  std::vector<Entry> validation;
  std::vector<std::string> skipped;  // "path: reason", one per unreadable file

  // Entry of global sample index g (train split).
  const Entry& sample(uint64_t seed, uint64_t g) const;
};

// Structure files under `dir` (recursively, sorted by path); throws naming a missing or
// unreadable directory.
std::vector<std::string> list_structure_files(const std::string& dir);

// Loads a feature cache (`dir` holds the index.tsv of `megafold cache`; no parsing), or else
// every structure file under `dir` (recursively, sorted by path). A file that cannot
// be used is skipped with a warning on stderr naming the file and the reason; the load
// fails only when no training entry is left. Long entries are kept whole: crops cut them.
// overfit: every entry trains, and `validation` holds the same entries (a memorisation check
// on a small set, whatever the split rule says).
Dataset load_dataset(const std::string& dir, bool quiet = false, bool overfit = false);

}  // namespace megafold::data
