// `megafold dev synth-cache`: a feature cache of many synthetic entries for loader benchmarks at
// PDB scale (bench/loader_scale.py): real structures under new ids, with synthetic MSAs.
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "core/check.h"
#include "data/cache.h"
#include "data/dataset.h"

namespace megafold::cli {

int synth_cache_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"from", "DIR", "structure files whose entries are repeated (default data/pdb)"},
      {"entries", "N", "entries to write (default 1000)"},
      {"msa-rows", "N", "MSA rows per chain, the query included (default 1024)"},
      {"out", "DIR", "cache directory to write"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("dev synth-cache",
                       "Write a feature cache of N entries without parsing them: entry i is structure i mod K of "
                       "--from renamed x<i>, with a synthetic MSA of --msa-rows rows per chain. For loader "
                       "benchmarks at PDB scale.",
                       specs);
    return 0;
  }
  MF_CHECK(args.has("out"), "--out is required (see --help)");
  std::vector<data::Entry> sources;
  for (const std::string& path : data::list_structure_files(args.get("from").value_or("data/pdb"))) {
    try {
      sources.push_back(data::load_entry(path));
    } catch (const std::exception& ex) {
      std::cerr << "warning: skipping " << ex.what() << "\n";
    }
  }
  const data::CacheSummary s = data::write_synthetic_cache(sources, args.get_int("entries", 1000),
                                                           args.get_int("msa-rows", 1024), *args.get("out"));
  std::printf("{\"entries\": %lld, \"msa_rows\": %lld, \"bytes\": %lld, \"seconds\": %.3f}\n",
              static_cast<long long>(s.entries), static_cast<long long>(s.msa_rows), static_cast<long long>(s.bytes),
              s.seconds);
  return 0;
}

}  // namespace megafold::cli
