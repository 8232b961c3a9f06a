// `megafold fit`: does a workload train at n tokens under a memory mode, and at what step time
// and peak memory? Runs whole optimiser steps (cli/workload.h) and prints one JSON line; an
// out-of-memory failure prints a row with "error": "out of memory" and exits with 3, so a
// search (bench/frontier.py) can tell it from a crash.
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/workload.h"
#include "core/check.h"
#include "core/memory.h"
#include "model/memory_plan.h"
#include "core/device.h"

namespace megafold::cli {
namespace {

bool out_of_memory(const std::exception& ex) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&ex) != nullptr) return true;
  const std::string what = ex.what();
  return what.find("out of memory") != std::string::npos;
}

}  // namespace

int fit_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "trunk48|af3-full", "the workload (default trunk48)"},
      {"n", "N", "tokens (default 384)"},
      {"memory", "fast|balanced|frontier", "memory mode (default fast)"},
      {"steps", "K", "optimiser steps; the step time is the median after the first (default 3)"},
      {"data", "DIR", "bundled structures, for af3-full (default data/pdb)"},
      {"device", "auto|cpu|cuda[:i]", "device (default auto)"},
      set_option(),
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("fit",
                       "Train a workload for a few steps at one crop and memory mode and print one JSON "
                       "line: step time (s), peak GPU memory (GB), pinned host memory of offloaded block "
                       "inputs, or \"error\": \"out of memory\" (exit code 3).\n"
                       "trunk48: the 48-block Pairformer stack on random inputs, one pass; af3-full: the "
                       "whole model of configs/af3-full.json (all recycling passes, 48 diffusion samples, "
                       "pLDDT head every step, 4 templates made from its own residues) on bundled 3kpr cropped or padded to N tokens.",
                       specs);
    return 0;
  }
  const std::string name = args.get("model").value_or("trunk48");
  const int64_t n = args.get_int("n", 384), steps = args.get_int("steps", 3);
  const std::string memory = args.get("memory").value_or("fast");
  MF_CHECK(steps >= 1, "--steps must be >= 1, got ", steps);
  track_cpu_allocations();
  const c10::Device device = megafold::resolve_device(args.get("device").value_or("auto"));
  megafold::make_current(device);

  nlohmann::json row = {{"model", name}, {"n", n}, {"memory_mode", memory}, {"device", device.str()}};
  if (!args.get_all("set").empty()) row["set"] = args.get_all("set");  // tells rows of one workload apart
  try {
    Workload w = make_workload(name, n, memory, args.get("data").value_or("data/pdb"), device, args.get_all("set"));
    row["plan"] = model::memory_plan(w.cfg.model).describe();
    row["inputs"] = w.inputs;
    row["parameters"] = w.parameters;
    std::cerr << "fit: " << name << " at " << n << " tokens, " << row["plan"].get<std::string>() << std::endl;
    megafold::synchronize(device);
    reset_peak_memory_stats(device);
    std::vector<double> seconds;
    double loss = 0;
    model::HostStash* stash = w.trunk->stash();
    for (int64_t k = 0; k < steps; ++k) {
      if (stash != nullptr) stash->reset_counts();
      const auto t0 = std::chrono::steady_clock::now();
      loss = w.step(k);
      megafold::synchronize(device);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::cerr << "fit: step " << k + 1 << " " << seconds.back() << " s, loss " << loss << std::endl;
    }
    std::vector<double> timed(seconds.begin() + (steps > 1 ? 1 : 0), seconds.end());
    std::sort(timed.begin(), timed.end());
    row["steps"] = steps;
    row["step_s"] = timed[timed.size() / 2];
    row["first_step_s"] = seconds.front();
    row["peak_gb"] = static_cast<double>(memory_stats(device).peak) / 1e9;
    row["loss"] = loss;
    if (stash != nullptr) {  // of the last step
      row["host_gb"] = static_cast<double>(stash->host_bytes()) / 1e9;
      row["offloaded_inputs"] = stash->offloaded();
      row["inputs_kept_on_gpu"] = stash->kept();
    }
  } catch (const std::exception& ex) {
    if (!out_of_memory(ex)) throw;
    row["error"] = "out of memory";
    const std::string what = ex.what();
    row["message"] = what.substr(0, what.find('\n'));
    std::cout << row.dump() << std::endl;
    return 3;
  }
  std::cout << row.dump() << std::endl;
  return 0;
}

}  // namespace megafold::cli
