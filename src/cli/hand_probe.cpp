// `megafold dev hand-probe`: whether a checkpoint's denoiser knows a structure's hand. lDDT
// cannot tell a structure from its mirror image; this denoises copies of the structure and of
// its reflection at each noise level and reports how many come out mirrored (model/hand_probe.h).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cli/args.h"
#include "core/check.h"
#include "core/files.h"
#include "infer/predictor.h"

namespace megafold::cli {

int hand_probe_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"checkpoint", "PATH", "checkpoint written by 'megafold train' (EMA weights)"},
      {"input", "FILE", "structure (.cif .pdb, optionally .gz) whose hand is probed"},
      {"noise", "T,T,..", "noise levels in Angstrom (default 1,2,5,10,20,40,80,160)"},
      {"draws", "K", "noisy copies per noise level and hand (default 16)"},
      {"seed", "N", "seed of the copies' rotations and noise (default 0)"},
      {"device", "DEV", "auto, cpu, cuda or cuda:N (default auto)"},
      {"out", "FILE", "also write the rows as JSON"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("dev hand-probe",
                       "Denoise randomly rotated noisy copies of a structure and of its mirror image once each, "
                       "at each noise level, and print the fraction of denoised copies that are the structure's "
                       "mirror image (token centre atoms superposed by proper rotations). A denoiser that knows "
                       "the hand gives 0 for both; one that keeps its input's hand gives 0 and 1. Sampled "
                       "structures take their hand where the denoiser stops deciding it.",
                       specs);
    return 0;
  }
  for (const char* required : {"checkpoint", "input"})
    if (!args.has(required)) throw Error(std::string("--") + required + " is required (see --help)");
  std::vector<double> noise;
  std::stringstream list(args.get("noise").value_or("1,2,5,10,20,40,80,160"));
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const double t = std::strtod(item.c_str(), &end);
    MF_CHECK(end != item.c_str() && *end == '\0' && t > 0, "--noise: '", item, "' is not a positive number");
    noise.push_back(t);
  }
  const int64_t draws = args.get_int("draws", 16);
  MF_CHECK(draws >= 1, "--draws must be >= 1");
  infer::PredictOptions po;
  po.device = args.get("device").value_or("auto");
  infer::Predictor predictor(*args.get("checkpoint"), po);
  const data::Entry e = infer::load_input(*args.get("input"));
  const std::vector<model::HandProbeRow> rows =
      predictor.probe_hand(e, noise, draws, static_cast<uint64_t>(args.get_int("seed", 0)));
  std::printf("%s, checkpoint step %lld, %lld copies per level: fraction denoised to the mirror image\n",
              e.name.c_str(), static_cast<long long>(predictor.step()), static_cast<long long>(draws));
  std::printf("%10s %14s %14s\n", "t (A)", "from truth", "from mirror");
  nlohmann::json out = nlohmann::json::array();
  for (const model::HandProbeRow& r : rows) {
    std::printf("%10g %14.3f %14.3f\n", r.t, r.from_truth, r.from_mirror);
    out.push_back({{"t", r.t}, {"from_truth", r.from_truth}, {"from_mirror", r.from_mirror}});
  }
  if (const auto path = args.get("out"))
    write_file_atomically(*path, nlohmann::json({{"entry", e.name}, {"checkpoint_step", predictor.step()},
                                                 {"draws", draws}, {"rows", out}})
                                     .dump(1) + "\n");
  return 0;
}

}  // namespace megafold::cli
