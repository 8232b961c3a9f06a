#pragma once
// The bundled-structure dataset: a directory of structure files, a fixed split by entry and
// a seed-deterministic sample stream.
//
// Split rule (documented in data/README.md): an entry is in validation iff
// fnv1a32(lowercase entry name) % 10 == 0. It depends on the name only, so it never moves
// when entries are added or removed.
//
// Sample stream: global sample index g -> (epoch = g / n, position = g % n) -> entry
// perm(seed, epoch)[position], the permutation evaluated at one position in O(1) (a keyed
// Feistel network, no table per draw); weighted sampling (of entries, or of AF3's chain and
// interface units, data/sampling.h) is a binary search over running sums. Every random choice
// downstream (crop) is seeded from (seed, g) as well, so the stream is a pure function of
// (seed, g): resume needs only g.
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/seed.h"
#include "data/crop.h"
#include "data/structure.h"

namespace megafold::data {

bool is_validation_entry(const std::string& name);

// One entry of a dataset: held in memory (parsed from a structure file), or only the index row
// of a feature cache entry, memory-mapped and decoded each time it is used, so that a cache's
// entries (MSAs included) never all sit in memory at once: a rank holds the index alone and
// the ranks of a host share the page cache.
class EntryRef {
 public:
  explicit EntryRef(Entry e) : name_(e.name), entry_(std::make_shared<const Entry>(std::move(e))) {}
  EntryRef(std::string name, std::string file) : name_(std::move(name)), file_(std::move(file)) {}
  const std::string& name() const { return name_; }
  // The entry; for a cache entry, decoded now (throws megafold::Error naming the file when it
  // is damaged or holds another entry).
  std::shared_ptr<const Entry> get() const;

 private:
  std::string name_, file_;
  std::shared_ptr<const Entry> entry_;
};

// A unit of AF3's weighted sampling (data/sampling.h): a training entry (index into
// Dataset::train) and the chain or interface its crop focuses on.
struct SamplingUnit {
  uint32_t entry = 0;
  CropFocus focus;
};

// What sample g draws: a training entry, and the unit's focus (none when entries are drawn).
struct Draw {
  size_t entry = 0;
  CropFocus focus;
};

struct Dataset {
  std::vector<EntryRef> train;
  std::vector<EntryRef> validation;
  std::vector<std::string> skipped;  // "path: reason", one per unreadable file
  // The feature cache the entries come from (its directory; "" for structure files).
  std::string cache_dir;
  // AF3's chain and interface units (use_af3_sampling, data/sampling.h); empty: whole entries.
  std::vector<SamplingUnit> units;
  // Running sums of the sampling weights: of the units when there are units, else of the
  // training entries (load_weights, load_clusters). Empty: every entry once per epoch, in a
  // seeded permutation. Otherwise each sample is an independent weighted draw (AF3 samples
  // with weights from cluster sizes), a pure function of (seed, g).
  std::vector<double> cumulative_weights;

  // What global sample index g (train split) draws: a pure function of (seed, g).
  Draw draw(uint64_t seed, uint64_t g) const;
  // The entry of that draw.
  const EntryRef& sample(uint64_t seed, uint64_t g) const { return train[draw(seed, g).entry]; }
};

// Sample g of the stream with what prepare(entry, draw index, focus) makes of its entry (e.g. a
// crop focused on the drawn unit). If prepare throws, the sample is replaced by sample
// mix_seed(g, k) for k = 1, 2, ... (its own entry and focus; at most `attempts` tries, a warning
// on stderr names each failure), so a bad entry is replaced by the same other draw on every
// run, thread count and rank. Throws after `attempts` failures.
template <typename Fn>
auto sample_or_replace(const Dataset& ds, uint64_t seed, uint64_t g, Fn&& prepare, int attempts = 8)
    -> std::pair<std::shared_ptr<const Entry>,
                 decltype(prepare(std::declval<const Entry&>(), g, std::declval<const CropFocus&>()))>;

// Reads per-entry sampling weights from a TSV file ("entry<TAB>weight" per line, '#' comments;
// e.g. 1 / cluster size). Every training entry needs a weight >= 0 and at least
// one must be > 0; errors name the file, line or entry. Sets ds.cumulative_weights over the
// entries (and drops any units: entries are drawn whole).
void load_weights(Dataset& ds, const std::string& path);

// Weights from clusters: a TSV file of "entry<TAB>cluster" lines ('#' comments), each training
// entry weighted 1 / (training entries in its cluster), so that every cluster is drawn equally
// often (AF3 SI 2.5.1 samples by cluster). An entry the file does not list is a cluster of its
// own (named in one warning with the count). Errors name the file and line. Sets
// ds.cumulative_weights over the entries (and drops any units: entries are drawn whole).
void load_clusters(Dataset& ds, const std::string& path, bool quiet = false);

// Structure files under `dir` (recursively, sorted by path); throws naming a missing or
// unreadable directory. What is passed over is named in `passed_over` when given (else
// printed as warnings): unreadable subdirectories, symlinked subdirectories (not followed, so
// that a link cycle cannot loop), links that are dangling or loop, structure-named paths that
// are not regular files (a FIFO would block the reader), and names holding a tab or newline
// (they would break the cache's tab-separated index).
std::vector<std::string> list_structure_files(const std::string& dir, std::vector<std::string>* passed_over = nullptr);

// Loads a feature cache (`dir` holds the index.tsv of `megafold cache`: only the index is read,
// each entry is mapped and decoded when sampled, and a damaged one is then named and replaced;
// Dataset::cache_dir names it),
// or else every structure file under `dir` (recursively, sorted by path). A file that cannot
// be used is skipped with a warning on stderr naming the file and the reason; the load
// fails only when no training entry is left. Long entries are kept whole: crops cut them.
// overfit: every entry trains, and `validation` holds the same entries (a memorisation check
// on a small set, whatever the split rule says). split_file: a TSV of "entry<TAB>train" or
// "entry<TAB>validation" lines ('#' comments) that overrides the name rule for the entries it
// lists (the others follow the rule, counted in a warning); "" = the rule alone. Raw files are
// parsed on every core, in path order, with progress on stderr every 5 s for large trees.
Dataset load_dataset(const std::string& dir, bool quiet = false, bool overfit = false,
                     const std::string& split_file = "");

// The split file's assignments: entry name -> true for validation. Throws naming file and line.
std::map<std::string, bool> read_split(const std::string& path);

void warn_replaced_sample(const std::string& name, uint64_t g, const std::exception& why);

template <typename Fn>
auto sample_or_replace(const Dataset& ds, uint64_t seed, uint64_t g, Fn&& prepare, int attempts)
    -> std::pair<std::shared_ptr<const Entry>,
                 decltype(prepare(std::declval<const Entry&>(), g, std::declval<const CropFocus&>()))> {
  uint64_t draw = g;
  for (int k = 1;; ++k) {
    const Draw d = ds.draw(seed, draw);
    const EntryRef& ref = ds.train[d.entry];
    try {
      std::shared_ptr<const Entry> e = ref.get();  // a damaged cache entry is replaced too
      auto prepared = prepare(*e, draw, d.focus);
      return {std::move(e), std::move(prepared)};
    } catch (const std::exception& ex) {
      if (k >= attempts) throw;
      warn_replaced_sample(ref.name(), g, ex);
      draw = mix_seed(g, static_cast<uint64_t>(k));
    }
  }
}

}  // namespace megafold::data
