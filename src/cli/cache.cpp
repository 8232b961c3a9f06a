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
      {"templates", "DIR",
       "optional per-chain template hit lists named <entry>_<chain>.a3m, .sto or .m8 (each optionally .gz): hmmsearch "
       "a3m or Stockholm, or BLAST tabular; needs --template-mmcif"},
      {"template-mmcif", "DIR", "the template structures: DIR/<pdbid>.cif[.gz] or the PDB mirror's DIR/<ab>/<pdbid>.cif.gz"},
      {"max-template-date", "DATE", "drop templates released after DATE, YYYY-MM-DD (default: no date filter)"},
      {"out", "CACHE", "cache directory (created; an existing one is completed, valid entries kept)"},
      {"jobs", "N", "worker threads (default: all cores)"},
      {"quiet", "", "no progress output"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("cache",
                       "Parse every structure once and store its deterministic features (tokens, numbering, "
                       "chains and entities, coordinates and masks, MSAs mapped onto each chain's residues, up to "
                       "20 templates per protein chain after dropping self-hits, hits of fewer than 10 aligned "
                       "residues, near-duplicates of the query and, with --max-template-date, later releases) as "
                       "one checksummed binary file per entry, read back by memory mapping.\nTrain from it with "
                       "'megafold train --data CACHE'. Rerunning skips entries already cached and valid; inputs "
                       "that cannot be used are listed with their reason in CACHE/skipped.tsv. CACHE/units.tsv "
                       "lists each entry's chains and interfaces, which data.sampling af3 draws (AF3 SI 2.5.1).",
                       specs);
    return 0;
  }
  for (const char* required : {"input", "out"})
    if (!args.has(required)) throw Error(std::string("--") + required + " is required (see --help)");
  data::CacheOptions o;
  o.input = *args.get("input");
  o.msa = args.get("msa").value_or("");
  o.templates.hits = args.get("templates").value_or("");
  o.templates.mmcif = args.get("template-mmcif").value_or("");
  o.templates.max_release_date = args.get("max-template-date").value_or("");
  if (o.templates.hits.empty() && (!o.templates.mmcif.empty() || !o.templates.max_release_date.empty()))
    throw Error("--template-mmcif and --max-template-date need --templates DIR (the hit lists; see --help)");
  if (!o.templates.hits.empty() && o.templates.mmcif.empty())
    throw Error("--templates needs --template-mmcif DIR, the structures its hits name (see --help)");
  if (!o.templates.max_release_date.empty() && !data::is_release_date(o.templates.max_release_date))
    throw Error("--max-template-date '" + o.templates.max_release_date + "' is not a date written YYYY-MM-DD");
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
              "skipped.tsv); %lld tokens, %lld chains, %lld MSA rows, %lld templates, %.1f MB; %.1f s (%.1f inputs/s)\n",
              o.out.c_str(), static_cast<long long>(s.entries), static_cast<long long>(s.built),
              static_cast<long long>(s.reused), static_cast<long long>(s.skipped), static_cast<long long>(s.warnings),
              static_cast<long long>(s.tokens), static_cast<long long>(s.chains), static_cast<long long>(s.msa_rows),
              static_cast<long long>(s.templates), s.bytes / 1e6, s.seconds,
              (s.entries + s.skipped) / std::max(s.seconds, 1e-9));
  return 0;
}

}  // namespace megafold::cli
