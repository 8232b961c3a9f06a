// `megafold predict`: structures and pLDDT for one input with a trained checkpoint.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <set>

#include "cli/args.h"
#include "core/check.h"
#include "core/files.h"
#include "data/msa.h"
#include "data/residue_constants.h"
#include "infer/predictor.h"

namespace megafold::cli {
namespace fs = std::filesystem;
namespace {

// Residues of chain `asym`: a per-atom residue (a ligand, a modified residue) has one token per
// atom, all with its residue index.
int residue_count(const data::Entry& e, int asym) {
  int count = 0, previous = -1;
  bool first = true;
  for (int i = 0; i < e.n_tokens(); ++i) {
    if (e.asym_id[i] != asym) continue;
    if (first || e.residue_index[i] != previous) ++count;
    previous = e.residue_index[i];
    first = false;
  }
  return count;
}

// Rounded for the JSON files (AF3 writes two decimals).
double round2(double x) { return std::round(x * 100.0) / 100.0; }

// A square [N, N] float tensor as rows of two-decimal numbers.
std::vector<std::vector<double>> rounded_matrix(const at::Tensor& m) {
  const at::Tensor c = m.contiguous();
  const int64_t N = c.size(0);
  const float* v = c.data_ptr<float>();
  std::vector<std::vector<double>> rows(N, std::vector<double>(N));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j) rows[i][j] = round2(v[i * N + j]);
  return rows;
}

// What AF3's <name>_confidences.json holds alike for every sample: each written atom's chain,
// each token's chain and residue number, and the contact probabilities over tokens.
nlohmann::json shared_confidences(const data::Entry& e, const std::vector<uint8_t>& written,
                                  const infer::PredictedEntry& r) {
  // The input's chain ids (an AF3 job's or FASTA's) where they name each chain once; else (a
  // structure's ligands share their polymer's author chain) the label ids of the mmCIF.
  const std::set<std::string> distinct(e.chain_ids.begin(), e.chain_ids.end());
  const bool own_ids = static_cast<int>(distinct.size()) == e.n_chains();
  std::vector<std::string> atom_chains, token_chains;
  std::vector<int> token_res_ids;
  for (int i = 0; i < e.n_tokens(); ++i) {
    token_chains.push_back(own_ids ? e.chain_ids[e.asym_id[i]] : data::chain_label(e.asym_id[i]));
    token_res_ids.push_back(e.residue_index[i]);
    for (int a = 0; a < data::kMaxAtomsPerToken; ++a)
      if (written[static_cast<size_t>(i) * data::kMaxAtomsPerToken + a]) atom_chains.push_back(token_chains.back());
  }
  return {{"atom_chain_ids", atom_chains}, {"contact_probs", rounded_matrix(r.contact_probs)},
          {"token_chain_ids", token_chains}, {"token_res_ids", token_res_ids}};
}

// Sample k's <name>_confidences.json: the shared part, its atoms' pLDDT (the B-factors written,
// per atom slot) and its PAE matrix.
nlohmann::json sample_confidences(nlohmann::json shared, const std::vector<uint8_t>& written,
                                  const std::vector<float>& plddt, const at::Tensor& pae) {
  std::vector<double> atom_plddts;
  for (size_t d = 0; d < written.size(); ++d)
    if (written[d]) atom_plddts.push_back(round2(plddt[d]));
  shared["atom_plddts"] = atom_plddts;
  shared["pae"] = rounded_matrix(pae);
  return shared;
}

// AF3's <name>_summary_confidences.json of sample k.
nlohmann::json summary_confidences(const infer::PredictedEntry& r, int64_t k) {
  const at::Tensor pair = r.chain_pair_iptm[k];
  const int64_t chains = pair.size(0);
  std::vector<std::vector<double>> chain_pair(chains, std::vector<double>(chains));
  std::vector<double> chain_ptm(chains);
  for (int64_t c = 0; c < chains; ++c) {
    chain_ptm[c] = pair[c][c].item<double>();
    for (int64_t d = 0; d < chains; ++d) chain_pair[c][d] = pair[c][d].item<double>();
  }
  return {{"ptm", r.ptm[k].item<double>()},
          {"iptm", r.iptm[k].item<double>()},
          {"chain_pair_iptm", chain_pair},
          {"chain_ptm", chain_ptm},
          {"fraction_disordered", r.fraction_disordered[k].item<double>()},
          {"has_clash", r.has_clash[k].item<bool>()},
          {"ranking_score", r.ranking_score[k].item<double>()}};
}

}  // namespace

int predict_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"checkpoint", "PATH", "checkpoint written by 'megafold train' (its config rebuilds the model)"},
      {"input", "FILE", "structure (.cif .pdb, optionally .gz: chains and numbering are kept, and the "
                        "prediction is scored against it), sequences (.fasta: one chain per record) or an "
                        "AlphaFold 3 job (.json, dialect alphafold3)"},
      {"out", "DIR", "output folder, laid out as AlphaFold 3's: seed-<s>_sample-<k>/<name>_seed-<s>_sample-<k>_model.cif "
                     "(and its confidences) per sample, the best-ranked one as <name>_model.cif, "
                     "<name>_ranking_scores.csv, and <name>_summary.json"},
      {"msa", "DIR", "MSAs of the input's protein and RNA chains: DIR/<name>_<chain>.a3m (or .a3m.gz), as "
                     "'megafold cache --msa' reads them; chains without a file (or with an MSA in the AF3 JSON) "
                     "keep theirs or run single-sequence"},
      {"samples", "K", "structures to sample (default 5)"},
      {"seed", "N", "sampler seed (default 0; AF3 JSON: its first modelSeeds entry)"},
      {"sampler-steps", "N", "diffusion sampler steps (default: the checkpoint config's, AF3: 200)"},
      {"device", "DEV", "auto, cpu, cuda or cuda:N (default auto)"},
      {"set", "KEY=VALUE", "override a key of the checkpoint's config (e.g. model.memory=frontier, "
                           "model.diffusion.sampler_steps=50); repeatable. Keys that change the model's shape "
                           "make the checkpoint fail to load", true},
      {"raw-weights", "", "use the raw training weights instead of their EMA"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("predict",
                       "Sample all-atom structures for every token of the input and write them as mmCIF, with "
                       "per-atom pLDDT in the B-factor column when the model has a confidence head.\nThe "
                       "summary JSON lists each sample's mean pLDDT and, for structure input, its lDDT-CA and "
                       "all-atom lDDT against the input coordinates and whether it is their mirror image (which "
                       "lDDT cannot see).",
                       specs);
    return 0;
  }
  for (const char* required : {"checkpoint", "input", "out"})
    if (!args.has(required)) throw Error(std::string("--") + required + " is required (see --help)");
  const std::string checkpoint = *args.get("checkpoint"), input = *args.get("input"), out = *args.get("out");
  const int64_t samples = args.get_int("samples", 5);
  if (samples < 1) throw Error("--samples must be >= 1");
  infer::PredictOptions po;
  po.device = args.get("device").value_or("auto");
  po.sampler_steps = args.get_int("sampler-steps", 0);
  po.set = args.get_all("set");
  po.ema = !args.has("raw-weights");

  std::vector<int64_t> seeds;
  data::Entry entry = infer::load_input(input, &seeds);
  if (auto dir = args.get("msa")) {
    MF_CHECK(std::filesystem::is_directory(*dir), "--msa ", *dir, ": not a directory");
    std::vector<std::string> warnings;
    data::attach_msas(entry, *dir, warnings);
    for (const std::string& w : warnings) std::cerr << "warning: " << w << std::endl;
    for (int c = 0; c < entry.n_chains(); ++c)
      if (!entry.msas.empty() && entry.msas[c].depth > 0)
        std::cout << "  chain " << entry.chain_ids[c] << ": MSA of " << entry.msas[c].depth << " rows" << std::endl;
  }
  for (int c = 0; c < static_cast<int>(entry.templates.size()); ++c)
    if (!entry.templates[c].empty())
      std::cout << "  chain " << entry.chain_ids[c] << ": " << entry.templates[c].size() << " template(s)" << std::endl;
  infer::Predictor predictor(checkpoint, po);
  const bool has_templates = std::any_of(entry.templates.begin(), entry.templates.end(),
                                         [](const auto& t) { return !t.empty(); });
  if (has_templates && (predictor.config().model.templates.n_blocks == 0 || predictor.config().data.max_templates == 0))
    std::cerr << "warning: " << input << " gives templates, but the model of " << checkpoint
              << " has no template embedder (model.templates.n_blocks or data.max_templates is 0): not used"
              << std::endl;
  // AF3 JSON names its seeds; --seed overrides them.
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", seeds.empty() ? 0 : seeds.front()));
  if (seeds.size() > 1 && !args.has("seed"))
    std::cerr << "warning: " << input << ": modelSeeds: sampling with the first seed (" << seeds.front()
              << ") only; run predict with --seed S for each of the others" << std::endl;
  std::cout << "predict: " << entry.name << ", " << entry.n_tokens() << " tokens in " << entry.n_chains()
            << " chain(s); " << samples << " sample(s) with " << predictor.config().model.diffusion.sampler_steps
            << " sampler steps on " << predictor.device().str() << " (checkpoint step " << predictor.step() << ")"
            << std::endl;
  const infer::PredictedEntry r = predictor.predict(entry, samples, seed);
  MF_CHECK(at::isfinite(r.coords).all().item<bool>(), "the sampled coordinates are not finite: the checkpoint ",
           checkpoint, " holds weights that diverged (its run logged non-finite losses?); "
           "nothing was written. Use an earlier checkpoint of that run");

  fs::create_directories(out);
  data::Entry predicted = entry;
  predicted.atom_mask = infer::predicted_atom_mask(entry);
  const int64_t A = r.coords.size(1);
  nlohmann::json chains = nlohmann::json::array(), rows = nlohmann::json::array();
  for (int c = 0; c < entry.n_chains(); ++c)
    chains.push_back({{"id", entry.chain_ids[c]}, {"label_asym_id", data::chain_label(c)},
                      {"molecule", data::mol_type_name(entry.chain_mol_type(c))},
                      {"residues", residue_count(entry, c)}, {"sequence", entry.sequence(c)}});
  const nlohmann::json shared = r.pae.defined() ? shared_confidences(entry, predicted.atom_mask, r) : nlohmann::json();
  // AlphaFold 3's output layout: each sample in seed-<s>_sample-<k>/ under names that carry the
  // job, seed and sample, and the best-ranked sample's files again at the top as <name>_*.
  const fs::path root(out);
  const std::string seed_tag = "seed-" + std::to_string(seed);
  // Per sample, what its model is written from and its confidence files (suffix, text), so that
  // the best-ranked one is written again at the top without reading anything back.
  std::vector<std::vector<float>> sample_coords(samples), sample_b_factors(samples);
  std::vector<std::vector<std::pair<std::string, std::string>>> confidence_files(samples);
  for (int64_t k = 0; k < samples; ++k) {
    const at::Tensor xyz = r.coords[k].contiguous();
    const std::vector<float> coords(xyz.data_ptr<float>(), xyz.data_ptr<float>() + A * 3);
    std::vector<float> b_factors;
    nlohmann::json row;
    const std::string dir = seed_tag + "_sample-" + std::to_string(k);
    const std::string stem = entry.name + "_" + dir;
    const std::string file = (fs::path(dir) / (stem + "_model.cif")).string();
    fs::create_directories(root / dir);
    row["sample"] = k;
    row["file"] = file;
    if (r.plddt.defined()) {
      const at::Tensor pl = r.plddt[k].contiguous();
      b_factors.assign(pl.data_ptr<float>(), pl.data_ptr<float>() + A);
      row["plddt_mean"] = r.plddt_mean[k];
    }
    if (!r.lddt_ca.empty()) {
      row["lddt_ca"] = r.lddt_ca[k];
      row["lddt_all_atom"] = r.lddt_all[k];
      row["mirror_image"] = static_cast<bool>(r.mirrored[k]);
    }
    if (r.pae.defined()) {
      const nlohmann::json scores = summary_confidences(r, k);
      confidence_files[k].push_back({"_confidences.json",
                            sample_confidences(shared, predicted.atom_mask, b_factors, r.pae[k]).dump() + "\n"});
      confidence_files[k].push_back({"_summary_confidences.json", scores.dump(2) + "\n"});
      for (const char* key : {"ptm", "iptm", "fraction_disordered", "ranking_score", "has_clash"})
        row[key] = scores[key];
    }
    data::write_mmcif(predicted, (root / file).string(), coords, b_factors);
    for (const auto& [suffix, text] : confidence_files[k])
      write_file_atomically((root / dir / (stem + suffix)).string(), text);
    sample_coords[k] = coords;
    sample_b_factors[k] = std::move(b_factors);
    rows.push_back(row);
    std::cout << "  " << file << ": " << row.dump() << std::endl;
  }
  nlohmann::json summary = {
      {"input", input},        {"name", entry.name}, {"checkpoint", checkpoint}, {"checkpoint_step", predictor.step()},
      {"config", predictor.config().name}, {"seed", seed}, {"sampler_steps", predictor.config().model.diffusion.sampler_steps},
      {"ema_weights", po.ema}, {"chains", chains}, {"samples", rows}};
  // Samples best first by ranking score, as AF3's ranking_scores.csv lists them (in sample order
  // without a confidence head).
  std::vector<int64_t> order(samples);
  std::iota(order.begin(), order.end(), 0);
  if (r.ranking_score.defined()) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return r.ranking_score[a].item<double>() > r.ranking_score[b].item<double>();
    });
    summary["ranking"] = order;
    std::string csv = "seed,sample,ranking_score\n";
    for (const int64_t k : order)
      csv += std::to_string(seed) + "," + std::to_string(k) + "," + std::to_string(r.ranking_score[k].item<double>()) + "\n";
    write_file_atomically((root / (entry.name + "_ranking_scores.csv")).string(), csv);
  }
  const int64_t best = order.front();
  data::write_mmcif(predicted, (root / (entry.name + "_model.cif")).string(), sample_coords[best], sample_b_factors[best]);
  for (const auto& [suffix, text] : confidence_files[best])
    write_file_atomically((root / (entry.name + suffix)).string(), text);
  summary["top"] = entry.name + "_model.cif";
  const std::string summary_path = (std::filesystem::path(out) / (entry.name + "_summary.json")).string();
  write_file_atomically(summary_path, summary.dump(2) + "\n");
  std::cout << "wrote " << samples << " structure(s) and " << summary_path << std::endl;
  return 0;
}

}  // namespace megafold::cli
