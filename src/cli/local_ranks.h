#pragma once
// --nproc N: run `megafold <command> <args>` (command: one or more words, e.g. "dev block") as
// ranks 0..N-1 of one job on this machine
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT set) and wait
// for all; the exit code is the first failing rank's (or 0).
#include <string>
#include <vector>

namespace megafold::cli {

int run_local_ranks(const std::string& command, int n, const std::vector<std::string>& args);

// argv without its --nproc N / --nproc=N (what each rank is given).
std::vector<std::string> without_nproc(const std::vector<std::string>& argv);

}  // namespace megafold::cli
