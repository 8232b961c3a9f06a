// `megafold cache`: parse a directory of structures (and MSAs) once into a feature cache.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "core/check.h"
#include "data/cache.h"

namespace megafold::cli {

int cache_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"input", "DIR", "directory of mmCIF/PDB files (.gz too), searched recursively"},
      {"msa", "DIR", "optional per-chain MSAs named <entry>_<chain>.a3m or .a3m.gz (author chain id)"},
      {"out", "CACHE", "cache directory (created; an existing one is completed, valid entries kept)"},
      {"jobs", "N", "worker threads (default: all cores)"},
      {"quiet", "", "no progress output"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("cache",
                       "Parse every structure once and store its deterministic features (tokens, numbering, "
                       "chains and entities, coordinates and masks, MSAs mapped onto each chain's residues) as "
                       "one checksummed binary file per entry, read back by memory mapping.\nTrain from it with "
                       "'megafold train --data CACHE'. Rerunning skips entries already cached and valid; inputs "
                       "that cannot be used are listed with their reason in CACHE/skipped.tsv.",
                       specs);
    return 0;
  }
  for (const char* required : {"input", "out"})
    if (!args.has(required)) throw Error(std::string("--") + required + " is required (see --help)");
  data::CacheOptions o;
  o.input = *args.get("input");
  o.msa = args.get("msa").value_or("");
  o.out = *args.get("out");
  o.jobs = static_cast<int>(args.get_int("jobs", 0));
  o.quiet = args.has("quiet");
  MF_CHECK(o.jobs >= 0, "--jobs must be >= 0");
  const bool tty = isatty(fileno(stdout));
  const data::CacheSummary s = data::build_cache(o, [&](int64_t done, int64_t total) {
    if (o.quiet || !tty) return;
    std::printf("\r%lld/%lld inputs", static_cast<long long>(done), static_cast<long long>(total));
    std::fflush(stdout);
  });
  if (tty && !o.quiet) std::printf("\n");
  std::printf("cache %s: %lld entries (%lld built, %lld already cached), %lld skipped, %lld warnings (see "
              "skipped.tsv); %lld tokens, %lld chains, %lld MSA rows, %.1f MB; %.1f s (%.1f inputs/s)\n",
              o.out.c_str(), static_cast<long long>(s.entries), static_cast<long long>(s.built),
              static_cast<long long>(s.reused), static_cast<long long>(s.skipped), static_cast<long long>(s.warnings),
              static_cast<long long>(s.tokens),
              static_cast<long long>(s.chains), static_cast<long long>(s.msa_rows), s.bytes / 1e6, s.seconds,
              (s.entries + s.skipped) / std::max(s.seconds, 1e-9));
  return 0;
}

}  // namespace megafold::cli
