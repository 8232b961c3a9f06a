#pragma once
// The ahead-of-time feature cache: every deterministic part of an entry (tokens, numbering,
// chains and entities, coordinates and masks, per-chain MSAs mapped onto the chain's residues,
// per-chain templates: the filtered hits' residues, atoms and masks, data/templates.h) parsed once and stored as one binary file per entry, read back by memory mapping without any
// parsing. Reference features of standard residues are not stored (a table lookup by token
// type); those of per-atom tokens (ligands, ions, non-standard residues) are. Coordinates are
// stored for the atom slots each token has (its residue's layout, or one), not all 24.
//
// Layout of a cache directory:
//   index.tsv         one line per entry, in the order of the input paths (as load_dataset reads
//                     files, so a cache and its input give the same sample stream): name, file,
//                     bytes, crc32 of the file, tokens, chains, MSA rows, source, inputs (a
//                     CRC-32 over the source file, its MSA files and template hit lists, and the
//                     template options: a rerun rebuilds an entry whose inputs changed, or whose
//                     file holds another entry; a template mmCIF changed in place is not noticed)
//   skipped.tsv       every input that was not cached, with the reason
//   units.tsv         each entry's chains (type, default cluster) and interfaces, with the CRC-32
//                     of the entry file they come from: AF3's sampling units (data/sampling.h
//                     gives the rows), so data.sampling af3 starts without decoding every entry
//   entries/<name>.mfe   one entry (format in cache.cpp; versioned, CRC-32 over the payload)
// Each entry file is written atomically; the index is written last, so a killed build leaves
// valid entries that a rerun keeps.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/structure.h"

namespace megafold::data {

// 2: MSA profiles; 3: all molecule types; 4: MSA row species; 5: per-chain templates
inline constexpr uint32_t kCacheVersion = 5;

// Serialises an entry (deterministic: the same entry gives the same bytes).
std::string encode_entry(const Entry& e);

// Parses and checks an entry file's bytes; `origin` names it in errors (bad magic, version,
// truncation, checksum mismatch).
Entry decode_entry(const unsigned char* data, size_t size, const std::string& origin);

// Memory-maps and decodes one entry file. Throws megafold::Error naming the file.
Entry read_entry_file(const std::string& path);

struct CacheOptions {
  std::string input;     // directory of mmCIF/PDB files (.gz too), searched recursively
  std::string msa;       // optional directory of <entry>_<chain>.a3m[.gz] files ("" = none)
  std::string out;       // cache directory
  int jobs = 0;          // worker threads, 0 = all cores
  bool quiet = false;
  // Template hit lists (directory, "" = none), the template structures' directory and the
  // latest release date a template may have ("" = any); data/templates.h. Default: none.
  TemplateOptions templates = {};
};

struct CacheSummary {
  int64_t entries = 0, built = 0, reused = 0, skipped = 0;
  int64_t warnings = 0;  // cached entries with something left out (unusable MSAs, skipped atoms)
  int64_t tokens = 0, chains = 0, msa_rows = 0, bytes = 0;
  int64_t templates = 0;  // templates kept, over all chains
  double seconds = 0;
};

// For benchmarks at PDB scale: a cache of `count` entries written directly (no parsing), entry
// i being sources[i % sources.size()] renamed "x<i>" (zero-padded) with a synthetic MSA of
// `msa_rows` rows per chain (the query, then random rows seeded by i), index, units and entry
// files laid out as build_cache writes them.
CacheSummary write_synthetic_cache(const std::vector<Entry>& sources, int64_t count, int64_t msa_rows,
                                   const std::string& out);

// Builds or completes a cache (see the header comment). An input that cannot be used is
// listed in skipped.tsv with its reason and never stops the build; an entry file already
// present and valid is kept. `progress` (may be empty) is called after each input.
CacheSummary build_cache(const CacheOptions& opts, const std::function<void(int64_t done, int64_t total)>& progress = {});

// True if `dir` holds a cache (an index.tsv).
bool is_cache_dir(const std::string& dir);

struct CacheIndexRow {
  std::string name;
  std::string path;   // the entry file
  std::string bytes;  // its size as the index records it
  std::string inputs;  // key of the source and MSA files it was built from ("" in older indexes)
  std::string crc32;   // the entry file's CRC-32 as the index records it (decimal)
};

// The entries a cache's index lists, in index order. Throws naming a malformed line.
std::vector<CacheIndexRow> read_cache_index(const std::string& dir);

struct CacheEntries {
  std::vector<Entry> entries;
  std::vector<std::string> skipped;  // "name (file): reason" for entries that failed their check
};

// Reads every entry of a cache's index. An entry file that is missing, truncated or fails its
// checksum is reported in `skipped` (naming the entry and the file), not fatal.
CacheEntries read_cache(const std::string& dir);

}  // namespace megafold::data
