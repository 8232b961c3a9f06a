// Launch variables of data-parallel jobs: torchrun's, Slurm's, the single-process default, and
// errors that name the variable.
#include <gtest/gtest.h>

#include <map>

#include "core/check.h"
#include "dist/process_group.h"

namespace megafold::dist {
namespace {

DistEnv from(const std::map<std::string, std::string>& vars) {
  return dist_env([&](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

TEST(DistEnv, TorchrunSlurmAndSingleProcess) {
  const DistEnv single = from({});
  EXPECT_EQ(single.world, 1);
  EXPECT_EQ(single.rank, 0);
  const DistEnv t = from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
                          {"MASTER_PORT", "23456"}});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.master_addr, "node7");
  EXPECT_EQ(t.master_port, 23456);
  const DistEnv s = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "5"}});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world, 16);
  EXPECT_EQ(s.local_rank, 5);
  // torchrun's variables win over Slurm's (torchrun inside a Slurm allocation).
  EXPECT_EQ(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "32"}}).world, 2);
}

TEST(DistEnv, BadValuesNameTheVariable) {
  auto error_of = [](const std::map<std::string, std::string>& vars) {
    try {
      from(vars);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({{"WORLD_SIZE", "two"}}).find("WORLD_SIZE='two' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK (or SLURM_PROCID) must lie in [0, 2)"),
            std::string::npos);
  EXPECT_NE(error_of({{"MASTER_PORT", "70000"}}).find("MASTER_PORT must be a TCP port"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "0"}}).find("must be >= 1"), std::string::npos);
}

}  // namespace
}  // namespace megafold::dist
