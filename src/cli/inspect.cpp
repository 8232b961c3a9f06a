// megafold inspect: what the loader makes of one structure, FASTA or AF3 JSON file (chains, molecule
// types, tokens, atoms, ligand components, bonds, what was dropped), as text or JSON.
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "data/ccd.h"
#include "data/structure.h"
#include "infer/predictor.h"

namespace megafold::cli {

int inspect_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {{"json", "", "print JSON instead of text"}, {"help", "", "show this help"}};
  const bool has_file = !argv.empty() && argv[0].rfind("--", 0) != 0;
  const Args args(std::vector<std::string>(argv.begin() + (has_file ? 1 : 0), argv.end()), specs);
  if (args.has("help") || !has_file) {
    std::cout << usage("inspect FILE",
                       "What the loader makes of a structure (.cif .pdb, optionally .gz), FASTA or AlphaFold 3 JSON file: chains, "
                       "molecule types, tokens, resolved atoms, MSA rows and templates per chain, ligand components and bonds.",
                       specs);
    return args.has("help") ? 0 : 2;
  }
  const data::Entry e = infer::load_input(argv[0]);
  nlohmann::json chains = nlohmann::json::array();
  int64_t atoms = 0;
  for (int c = 0; c < e.n_chains(); ++c) {
    int64_t tokens = 0, resolved = 0;
    for (int i = 0; i < e.n_tokens(); ++i) {
      if (e.asym_id[i] != c) continue;
      ++tokens;
      for (int a = 0; a < data::kMaxAtomsPerToken; ++a)
        resolved += e.atom_mask[static_cast<size_t>(i) * data::kMaxAtomsPerToken + a];
    }
    atoms += resolved;
    // What the model is shown besides the sequence: the MSA's sequences (query first) and templates.
    nlohmann::json templates = nlohmann::json::array();
    if (c < static_cast<int>(e.templates.size()))
      for (const data::ChainTemplate& t : e.templates[c]) templates.push_back(t.name);
    chains.push_back({{"asym_id", c},
                      {"chain", e.chain_ids[c]},
                      {"mol_type", std::string(data::mol_type_name(e.chain_mol_type(c)))},
                      {"tokens", tokens},
                      {"atoms", resolved},
                      {"msa_rows", c < static_cast<int>(e.msas.size()) ? e.msas[c].depth : 0},
                      {"templates", templates},
                      {"sequence", e.sequence(c)}});
  }
  std::string why, ccd = "none";
  if (const data::Ccd* table = data::usable_default_ccd(&why)) ccd = table->path() + " (" + table->source() + ")";
  if (!why.empty()) ccd = "unusable: " + why;  // the file loaded without it (its warning says so)
  const nlohmann::json out = {{"name", e.name},
                              {"path", e.path},
                              {"tokens", e.n_tokens()},
                              {"atoms", atoms},
                              {"chains", chains},
                              {"components", e.components},
                              {"bonds", e.bonds.size()},
                              {"dropped_residues", e.dropped_residues},
                              {"dropped_hydrogens", e.dropped_hydrogens},
                              {"ccd", ccd}};
  if (args.has("json")) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << e.name << ": " << e.n_tokens() << " tokens, " << atoms << " resolved heavy atoms, " << e.n_chains()
            << " chains, " << e.bonds.size() << " token bonds; dropped " << e.dropped_residues << " residues, "
            << e.dropped_hydrogens << " hydrogens\n";
  for (const auto& c : chains) {
    std::string seq = c["sequence"];
    if (seq.size() > 60) seq = seq.substr(0, 57) + "...";
    std::string extra;
    if (c["msa_rows"].get<int64_t>() > 0) extra += ", MSA of " + std::to_string(c["msa_rows"].get<int64_t>()) + " sequences";
    if (!c["templates"].empty()) extra += ", " + std::to_string(c["templates"].size()) + " template(s)";
    std::cout << "  " << c["asym_id"].get<int>() << " chain " << c["chain"].get<std::string>() << "  "
              << c["mol_type"].get<std::string>() << "  " << c["tokens"].get<int64_t>() << " tokens, "
              << c["atoms"].get<int64_t>() << " atoms" << extra << "  " << seq << "\n";
  }
  std::cout << "CCD: " << out["ccd"].get<std::string>() << "\n";
  return 0;
}

}  // namespace megafold::cli
