// `megafold eval`: lDDT of sampled structures over a directory of structures.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/args.h"
#include "core/check.h"
#include "core/files.h"
#include "core/seed.h"
#include "data/dataset.h"
#include "data/crop.h"
#include "data/features.h"
#include "infer/predictor.h"

namespace megafold::cli {
namespace {

// A ligand pose counts as correct below this pocket-aligned RMSD (the PoseBusters convention).
constexpr double kLigandSuccessRmsd = 2.0;

double mean(const std::vector<double>& xs) {
  double s = 0;
  for (double x : xs) s += x;
  return xs.empty() ? 0.0 : s / static_cast<double>(xs.size());
}

}  // namespace

int eval_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"checkpoint", "PATH", "checkpoint written by 'megafold train'"},
      {"data", "DIR", "directory of mmCIF/PDB files, searched recursively"},
      {"split", "NAME", "all (default), validation or train: which entries of the fixed split to score"},
      {"samples", "K", "structures per entry (default 1); lDDT is averaged over them, best also reported"},
      {"max-tokens", "N", "score a fixed contiguous crop of at most N tokens of longer entries (default: whole)"},
      {"seed", "N", "sampler seed (default 0; each entry's seed also depends on its name)"},
      {"sampler-steps", "N", "diffusion sampler steps (default: the checkpoint config's)"},
      {"device", "DEV", "auto, cpu, cuda or cuda:N (default auto)"},
      {"set", "KEY=VALUE", "override a key of the checkpoint's config (e.g. model.memory=frontier, "
                           "model.diffusion.sampler_steps=50); repeatable. Keys that change the model's shape "
                           "make the checkpoint fail to load", true},
      {"out", "FILE", "JSON results (default eval.json)"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("eval",
                       "Sample structures for every entry of a directory and score them against the deposited "
                       "coordinates: lDDT-CA (CA/C1') and all-atom lDDT per entry and on average, all-atom lDDT "
                       "per molecule type (protein, rna, dna, ligand; pairs within 30 A of nucleotide atoms, 15 A "
                       "of the others), ligand RMSD after superposing the pocket "
                       "(polymer CA/C1' within 10 A of the ligand) and the fraction of ligands below 2 A, plus "
                       "mean pLDDT with a confidence head. Prints a table and writes JSON. Unreadable files are "
                       "skipped with a warning and listed in the JSON.",
                       specs);
    return 0;
  }
  for (const char* required : {"checkpoint", "data"})
    if (!args.has(required)) throw Error(std::string("--") + required + " is required (see --help)");
  const std::string split = args.get("split").value_or("all");
  MF_CHECK(split == "all" || split == "validation" || split == "train", "--split must be all, validation or train, got '",
           split, "'");
  const int64_t samples = args.get_int("samples", 1), max_tokens = args.get_int("max-tokens", 0);
  MF_CHECK(samples >= 1 && max_tokens >= 0, "--samples must be >= 1 and --max-tokens >= 0");
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0));
  infer::PredictOptions po;
  po.device = args.get("device").value_or("auto");
  po.sampler_steps = args.get_int("sampler-steps", 0);
  po.set = args.get_all("set");
  infer::Predictor predictor(*args.get("checkpoint"), po);

  nlohmann::json rows = nlohmann::json::array(), skipped = nlohmann::json::array();
  std::vector<double> all_ca, all_atom, all_plddt, all_rmsd, all_mirrored;
  std::array<std::vector<double>, data::kNumMolTypes> type_lddt;
  std::map<std::string, std::string> seen;  // entry name -> the file it was scored from
  std::printf("%-12s %7s %9s %9s %13s %7s %8s\n", "entry", "tokens", "lDDT-CA", "best-CA", "all-atom lDDT", "pLDDT",
              "seconds");
  for (const std::string& path : data::list_structure_files(*args.get("data"))) {
    data::Entry e;
    try {
      e = data::load_entry(path);
      for (const std::string& w : e.warnings) std::cerr << "warning: " << w << "\n";
    } catch (const std::exception& ex) {
      std::cerr << "warning: skipping " << ex.what() << "\n";
      skipped.push_back(ex.what());
      continue;
    }
    const bool validation = data::is_validation_entry(e.name);
    if ((split == "validation" && !validation) || (split == "train" && validation)) continue;
    if (auto [it, fresh] = seen.emplace(e.name, path); !fresh) {  // 1abc.cif and 1abc.pdb.gz: one entry
      const std::string why = path + ": entry " + e.name + " is already scored (from " + it->second + ")";
      std::cerr << "warning: skipping " << why << "\n";
      skipped.push_back(why);
      continue;
    }
    if (max_tokens > 0 && e.n_tokens() > max_tokens)
      e = data::select_tokens(e, data::contiguous_crop(e, static_cast<int>(max_tokens), fnv1a32(e.name)));
    const auto t0 = std::chrono::steady_clock::now();
    infer::PredictedEntry r;
    try {
      r = predictor.predict(e, samples, mix_seed(seed, fnv1a32(e.name)));
    } catch (const Error& ex) {  // e.g. too large for the device: this entry only
      std::cerr << "warning: skipping " << path << ": " << ex.what() << "\n";
      skipped.push_back(path + ": " + ex.what());
      continue;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!std::isfinite(mean(r.lddt_ca)) || !std::isfinite(mean(r.lddt_all))) {  // kept out of the means
      const std::string why = path + ": entry " + e.name + " scored non-finite (diverged weights?)";
      std::cerr << "warning: " << why << "\n";
      skipped.push_back(why);
      continue;
    }
    nlohmann::json row = {{"entry", e.name}, {"path", path}, {"tokens", e.n_tokens()}, {"validation", validation},
                          {"lddt_ca", mean(r.lddt_ca)}, {"lddt_ca_best", *std::max_element(r.lddt_ca.begin(), r.lddt_ca.end())},
                          {"lddt_all_atom", mean(r.lddt_all)}, {"seconds", seconds}};
    // The fraction of samples that are the entry's mirror image: lDDT cannot see a reflection.
    const double mirrored = static_cast<double>(std::count(r.mirrored.begin(), r.mirrored.end(), true)) /
                            static_cast<double>(std::max<size_t>(r.mirrored.size(), 1));
    row["mirror_images"] = mirrored;
    all_mirrored.push_back(mirrored);
    // Per molecule type (the types the entry has) and per ligand chain, averaged over samples.
    nlohmann::json by_type = nlohmann::json::object();
    for (int m = 0; m < data::kNumMolTypes; ++m) {
      std::vector<double> v;
      for (const auto& s : r.lddt_by_type)
        if (std::isfinite(s[m])) v.push_back(s[m]);
      if (!v.empty()) {
        by_type[std::string(data::mol_type_name(static_cast<data::MolType>(m)))] = mean(v);
        type_lddt[m].push_back(mean(v));
      }
    }
    row["lddt_by_type"] = by_type;
    std::vector<double> rmsd;
    for (const auto& s : r.ligand_rmsd)
      for (const double x : s)
        if (std::isfinite(x)) rmsd.push_back(x);
    if (!rmsd.empty()) {
      int good = 0;
      for (const double x : rmsd) good += x < kLigandSuccessRmsd;
      row["ligand_rmsd"] = mean(rmsd);
      row["ligand_rmsd_below_2A"] = static_cast<double>(good) / static_cast<double>(rmsd.size());
      all_rmsd.insert(all_rmsd.end(), rmsd.begin(), rmsd.end());
    }
    const double plddt = mean(r.plddt_mean);
    if (r.plddt.defined()) {
      row["plddt"] = plddt;
      all_plddt.push_back(plddt);
    }
    all_ca.push_back(row["lddt_ca"]);
    all_atom.push_back(row["lddt_all_atom"]);
    std::printf("%-12s %7d %9.4f %9.4f %13.4f %7s %8.1f\n", e.name.c_str(), e.n_tokens(), mean(r.lddt_ca),
                row["lddt_ca_best"].get<double>(), mean(r.lddt_all),
                r.plddt.defined() ? std::to_string(plddt).substr(0, 5).c_str() : "-", seconds);
    std::fflush(stdout);
    rows.push_back(row);
  }
  MF_CHECK(!rows.empty(), "no entry to score under ", *args.get("data"), " (split ", split, ")");
  std::printf("%-12s %7zu %9.4f %9s %13.4f %7s\n", "mean", rows.size(), mean(all_ca), "", mean(all_atom),
              all_plddt.empty() ? "-" : std::to_string(mean(all_plddt)).substr(0, 5).c_str());
  nlohmann::json summary = {{"checkpoint", *args.get("checkpoint")}, {"checkpoint_step", predictor.step()},
                            {"config", predictor.config().name}, {"data", *args.get("data")}, {"split", split},
                            {"samples", samples}, {"max_tokens", max_tokens}, {"seed", seed},
                            {"sampler_steps", predictor.config().model.diffusion.sampler_steps},
                            {"device", predictor.device().str()}, {"entries", rows.size()},
                            {"lddt_ca", mean(all_ca)}, {"lddt_all_atom", mean(all_atom)},
                            {"mirror_images", mean(all_mirrored)}, {"rows", rows},
                            {"skipped", skipped}};
  if (!all_plddt.empty()) summary["plddt"] = mean(all_plddt);
  nlohmann::json by_type = nlohmann::json::object();
  for (int m = 0; m < data::kNumMolTypes; ++m)
    if (!type_lddt[m].empty()) by_type[std::string(data::mol_type_name(static_cast<data::MolType>(m)))] = mean(type_lddt[m]);
  summary["lddt_by_type"] = by_type;
  if (!all_rmsd.empty()) {
    int good = 0;
    for (const double x : all_rmsd) good += x < kLigandSuccessRmsd;
    summary["ligand_rmsd"] = mean(all_rmsd);
    summary["ligand_rmsd_below_2A"] = static_cast<double>(good) / static_cast<double>(all_rmsd.size());
    summary["ligands"] = all_rmsd.size();
  }
  for (int m = 0; m < data::kNumMolTypes; ++m)
    if (!type_lddt[m].empty())
      std::printf("lDDT %-8s %9.4f over %zu entries\n", std::string(data::mol_type_name(static_cast<data::MolType>(m))).c_str(),
                  mean(type_lddt[m]), type_lddt[m].size());
  if (!all_rmsd.empty())
    std::printf("ligand RMSD (pocket-aligned) %.2f A mean, %.0f%% below 2 A, over %zu ligand chains x samples\n",
                mean(all_rmsd), 100.0 * summary["ligand_rmsd_below_2A"].get<double>(), all_rmsd.size());
  const std::string out = args.get("out").value_or("eval.json");
  write_file_atomically(out, summary.dump(2) + "\n");
  std::cout << "wrote " << out << std::endl;
  return 0;
}

}  // namespace megafold::cli
