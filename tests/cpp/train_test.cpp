// Trainer pieces: schedule, config resolution and errors, atomic checkpoints.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "core/check.h"
#include "model/model.h"
#include "core/checkpoint.h"
#include "config/config.h"
#include "train/trainer.h"

namespace megafold::train {
using namespace megafold::config;  // the run configuration these pieces read
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string error_of(const std::string& json) {
  try {
    parse_config(json, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Schedule, WarmupThenStepDecay) {
  OptimConfig o;
  o.lr = 1.0;
  o.warmup_steps = 4;
  o.decay_every = 10;
  o.decay_factor = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 4), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 13), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 14), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 34), 0.125);
}

TEST(Config, BuiltinsParseAndFullSizeIsAf3) {
  for (const auto& name : builtin_config_names()) EXPECT_NO_THROW(load_config(name)) << name;
  const TrainConfig full = load_config("af3-full");
  EXPECT_EQ(full.model.n_blocks, 48);
  EXPECT_EQ(full.model.c_s, 384);
  EXPECT_EQ(full.model.c_z, 128);
  EXPECT_EQ(full.model.tri_attn_heads * full.model.tri_attn_head_dim, 128);
  EXPECT_EQ(full.model.single_attn_heads, 16);
  EXPECT_TRUE(full.model.checkpoint_blocks);
  // AF3 trains without the bond loss and fine-tunes with it (alpha_bond = 1), on larger crops
  // with 32 diffusion samples.
  EXPECT_EQ(full.model.diffusion.bond_weight, 0.0);
  const TrainConfig fine = load_config("af3-finetune");
  EXPECT_EQ(fine.model.diffusion.bond_weight, 1.0);
  EXPECT_EQ(fine.model.diffusion.samples, 32);
  EXPECT_EQ(fine.data.crop_size, 640);
  // The PAE loss is off in the initial stage and on in fine-tuning; the second fine-tuning
  // stage is the first on crops of 768.
  EXPECT_EQ(full.model.confidence.pae_weight, 0.0);
  EXPECT_EQ(fine.model.confidence.pae_weight, 1.0);
  const TrainConfig fine768 = load_config("af3-finetune-768");
  EXPECT_EQ(fine768.data.crop_size, 768);
  EXPECT_EQ(fine768.model.diffusion.samples, 32);
  EXPECT_EQ(fine768.model.diffusion.bond_weight, 1.0);
  EXPECT_EQ(fine768.model.c_z, fine.model.c_z);
}

// Command-line assignments: dotted keys into nested sections, values read as JSON or else as
// text, applied in order after the file; every error names the assignment.
TEST(Config, SetAssignmentsOverrideTheFile) {
  const TrainConfig c = load_config("cpu-tiny", {"optim.lr=1e-4", "steps=5", "model.memory=frontier",
                                                 "data.overfit=true", "name=2024", "model.diffusion.sampler_steps=7",
                                                 "steps=6"});
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-4);
  EXPECT_EQ(c.steps, 6);  // the later assignment wins
  EXPECT_EQ(c.model.memory, "frontier");
  EXPECT_TRUE(c.data.overfit);
  EXPECT_EQ(c.name, "2024");  // JSON number, taken as the string the key needs
  EXPECT_EQ(c.model.diffusion.sampler_steps, 7);
  EXPECT_EQ(c.model.c_z, load_config("cpu-tiny").model.c_z);  // the rest from the file
  const json saved = json::parse(to_json(c));
  EXPECT_EQ(saved["optim"]["lr"], 1e-4);
  EXPECT_EQ(saved["steps"], 6);

  auto error = [](const std::vector<std::string>& set) {
    try {
      load_config("cpu-tiny", set);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({"optim.lrr=1"}).find("--set optim.lrr=1"), std::string::npos);
  EXPECT_NE(error({"optim.lrr=1"}).find("unknown key 'lrr'"), std::string::npos);
  EXPECT_NE(error({"steps=many"}).find("--set steps=many: key 'steps' has the wrong type"), std::string::npos)
      << error({"steps=many"});
  EXPECT_NE(error({"steps"}).find("expected KEY=VALUE"), std::string::npos);
  EXPECT_NE(error({"model..c_z=8"}).find("empty part"), std::string::npos);
  EXPECT_NE(error({"base=gpu-small"}).find("'base' is not a setting"), std::string::npos);
  EXPECT_NE(error({"steps=0"}).find("'steps' must be > 0"), std::string::npos);  // validated after
  EXPECT_NE(error({"steps=0"}).find("with --set"), std::string::npos);
}

// 'base' names a built-in config or a file, relative to the file that names it.
TEST(Config, BaseMayBeAFile) {
  const fs::path dir = fs::temp_directory_path() / ("megafold_config_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "common.json") << R"({"base": "cpu-tiny", "steps": 3, "optim": {"lr": 0.01}})";
  std::ofstream(dir / "run.json") << R"({"base": "sub/common.json", "seed": 5})";
  std::ofstream(dir / "broken.json") << R"({"base": "missing.json"})";
  const TrainConfig c = load_config((dir / "run.json").string());
  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.seed, 5u);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.01);
  EXPECT_EQ(c.model.c_z, load_config("cpu-tiny").model.c_z);
  try {
    load_config((dir / "broken.json").string());
    ADD_FAILURE() << "a missing base file loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.json"), std::string::npos) << what;
    EXPECT_NE(what.find((dir / "missing.json").string()), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

TEST(Config, BaseInheritanceAndRoundTrip) {
  const TrainConfig c = parse_config(R"({"base": "gpu-small", "steps": 7, "model": {"n_blocks": 2}})", "t");
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.model.n_blocks, 2);
  EXPECT_EQ(c.model.c_z, 128);
  EXPECT_EQ(to_json(parse_config(to_json(c), "again")), to_json(c));
}

// Values that used to pass silently: fractional or overflowing integers, numbers for booleans,
// duplicate keys, a zero AdamW eps, widths no model of this kind has.
TEST(Config, NumbersAreCheckedNotConverted) {
  const std::string fractional = error_of(R"({"data": {"crop_size": 384.5}})");
  EXPECT_NE(fractional.find("key 'crop_size' must be a whole number, got 384.5"), std::string::npos) << fractional;
  EXPECT_EQ(parse_config(R"({"data": {"crop_size": 256.0}})", "t").data.crop_size, 256);
  EXPECT_NE(error_of(R"({"data": {"crop_size": 18446744073709551616}})").find("crop_size"), std::string::npos);
  EXPECT_NE(error_of(R"({"seed": -1})").find("key 'seed' must not be negative"), std::string::npos);
  EXPECT_NE(error_of(R"({"bf16": 1})").find("key 'bf16' has the wrong type (true or false expected)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optim": {"lr": "fast"}})").find("key 'lr' has the wrong type (a number expected)"),
            std::string::npos);
  const std::string twice = error_of(R"({"steps": 5, "model": {"c_z": 8, "c_z": 16}})");
  EXPECT_NE(twice.find("test.json: key 'c_z' is given twice"), std::string::npos) << twice;
  EXPECT_EQ(error_of(R"({"model": {"msa": {"heads": 2}}, "data": {"msa_rows": 8}})"), "");  // same key names, other objects
  EXPECT_NE(error_of(R"({"optim": {"eps": 0}})").find("'optim.eps' must be > 0"), std::string::npos);
  const std::string wide = error_of(R"({"model": {"c_z": 200000}})");
  EXPECT_NE(wide.find("'model.c_z' 200000 is beyond 8192"), std::string::npos) << wide;
  EXPECT_NE(error_of(R"({"max_skipped_steps": -1})").find("'max_skipped_steps' must be >= 0"), std::string::npos);
}

TEST(Config, ErrorsNameTheFileAndKey) {
  EXPECT_NE(error_of(R"({"stpes": 3})").find("test.json: unknown key 'stpes'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"c_z": "wide"}})").find("'c_z' has the wrong type"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"n_blocks": 0}})").find("'model.n_blocks' must be > 0"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("test.json: invalid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"base": "nope"})").find("base 'nope' is neither a built-in config"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": 3})").find("test.json [model]: must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"optim": {"ema_decay": 1.5}})").find("'optim.ema_decay' must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"distogram_min": 30}})").find("distogram_min"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"diffusion": {"sampels": 4}}})").find("test.json [model] [diffusion]: unknown key 'sampels'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"diffusion": {"samples": 2, "heads": 5}}})").find("multiples of 'heads'"),
            std::string::npos);
}

TEST(Config, DiffusionAndConfidenceSectionsRoundTripAndCountForResume) {
  // The defaults for each machine train the whole model: trunk with recycling, diffusion, pLDDT.
  for (const char* name : {"cpu-tiny", "gpu-small", "af3-full"}) {
    const TrainConfig c = load_config(name);
    EXPECT_GT(c.model.diffusion.samples, 0) << name;
    EXPECT_GT(c.model.confidence.n_blocks, 0) << name;
    EXPECT_GT(c.model.recycles, 1) << name;
    const TrainConfig back = parse_config(to_json(c), "round trip");
    EXPECT_EQ(to_json(back), to_json(c)) << name;
  }
  const TrainConfig a = load_config("cpu-tiny");
  TrainConfig b = a;
  b.model.diffusion.c_atom = a.model.diffusion.c_atom * 2;
  EXPECT_NE(resume_mismatch(a, b).find("model.diffusion"), std::string::npos) << resume_mismatch(a, b);
  b = a;
  b.model.confidence.n_blocks = 3;
  EXPECT_NE(resume_mismatch(a, b).find("model.confidence"), std::string::npos) << resume_mismatch(a, b);
  EXPECT_NE(error_of(R"({"model": {"diffusion": {"samples": 0}, "confidence": {"n_blocks": 1}}})")
                .find("'model.confidence' needs the diffusion module"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"recycles": 0}})").find("'model.recycles' must be > 0"), std::string::npos);
}

TEST(Config, ResumeMismatchNamesChangedSettings) {
  const TrainConfig a = load_config("cpu-tiny");
  TrainConfig b = a;
  b.steps = a.steps + 100;  // allowed
  b.data.dir = "/elsewhere";
  EXPECT_EQ(resume_mismatch(a, b), "");
  b.model.c_z = 48;
  b.data.crop_size = 32;
  b.seed = 5;
  const std::string diff = resume_mismatch(a, b);
  EXPECT_NE(diff.find("model.c_z 32 -> 48"), std::string::npos) << diff;
  EXPECT_NE(diff.find("data.crop_size 64 -> 32"), std::string::npos) << diff;
  EXPECT_NE(diff.find("seed"), std::string::npos) << diff;
}

// A model small enough to checkpoint in milliseconds.
model::ModelConfig tiny_model() {
  model::ModelConfig mc;
  mc.c_s = 8, mc.c_z = 4, mc.n_blocks = 1, mc.tri_attn_heads = 1, mc.tri_attn_head_dim = 2,
  mc.tri_mul_hidden = 2, mc.single_attn_heads = 1, mc.single_attn_head_dim = 2;
  return mc;
}

TEST(Checkpoint, RoundTripKeepsNewestAndIgnoresTornFiles) {
  const fs::path dir = fs::temp_directory_path() / ("megafold_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  model::ModelConfig mc = tiny_model();
  mc.msa.n_blocks = 1, mc.msa.c_m = 4, mc.msa.opm_hidden = 2, mc.msa.heads = 1, mc.msa.head_dim = 2;
  model::MegaFold m(mc);
  auto params = m->parameters();
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3));
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  opt.step();  // non-trivial optimiser state
  std::vector<at::Tensor> ema;
  for (auto& p : params) ema.push_back(p.detach().clone() + 1);
  for (int64_t step : {10, 20, 30, 40}) save_checkpoint(dir.string(), {step, 99, "{}"}, *m, ema, opt, 2);
  std::ofstream(dir / "step_00000050.pt.tmp") << "torn";  // a write killed half-way
  ASSERT_EQ(latest_checkpoint(dir.string()).value(), (dir / "step_00000040.pt").string());
  EXPECT_FALSE(fs::exists(dir / "step_00000020.pt"));
  EXPECT_TRUE(fs::exists(dir / "step_00000030.pt"));

  model::MegaFold m2(mc);
  auto params2 = m2->parameters();
  torch::optim::AdamW opt2(params2, torch::optim::AdamWOptions(1e-3));
  std::vector<at::Tensor> ema2;
  for (auto& p : params2) ema2.push_back(torch::zeros_like(p));
  const CheckpointMeta meta = load_checkpoint(*latest_checkpoint(dir.string()), *m2, ema2, opt2);
  EXPECT_EQ(meta.step, 40);
  EXPECT_EQ(meta.seed, 99u);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::equal(params[i], params2[i]));
    EXPECT_TRUE(at::equal(ema[i], ema2[i]));
  }
  std::ofstream(dir / "step_00000060.pt") << "garbage";
  try {
    load_checkpoint((dir / "step_00000060.pt").string(), *m2, ema2, opt2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step_00000060.pt: cannot load checkpoint"), std::string::npos);
  }
  fs::remove_all(dir);
}

// Each checkpoint carries a CRC-32 (written first, pruned with it): a flipped bit or a cut
// copy is an error naming the file before anything loads. A write that fails (here a file-size
// limit, EFBIG, as a full disk fails with ENOSPC) names the path, leaves no partial file and
// keeps the previous checkpoints.
TEST(Checkpoint, ChecksumsCatchDamageAndFailedWritesKeepThePrevious) {
  const fs::path dir = fs::temp_directory_path() / ("megafold_crc_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  model::MegaFold m(tiny_model());
  auto params = m->parameters();
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3));
  std::vector<at::Tensor> ema;
  for (auto& p : params) ema.push_back(torch::randn_like(p));
  for (int64_t step : {1, 2, 3}) save_checkpoint(dir.string(), {step, 7, "{}"}, *m, ema, opt, 2);
  EXPECT_FALSE(fs::exists(dir / "step_00000001.pt.crc32"));  // pruned with its checkpoint
  const std::vector<std::string> all = checkpoints_newest_first(dir.string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], (dir / "step_00000003.pt").string());
  EXPECT_NO_THROW(verify_checkpoint(all[0]));
  EXPECT_EQ(CheckpointReader(all[0]).meta().step, 3);

  std::string bytes;
  {
    std::ifstream in(all[0], std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 3] ^= 0x01;
  std::ofstream(all[0], std::ios::binary) << bytes;
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] { verify_checkpoint(all[0]); }).find("step_00000003.pt: checksum mismatch"), std::string::npos);
  EXPECT_NE(message([&] { CheckpointReader r(all[0]); }).find("checksum mismatch"), std::string::npos);
  EXPECT_NE(message([&] { load_weights(all[0], *m, true); }).find("checksum mismatch"), std::string::npos);

  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string failed = message([&] { save_checkpoint(dir.string(), {4, 7, "{}"}, *m, ema, opt, 2); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_NE(failed.find("step_00000004.pt.tmp"), std::string::npos) << failed;
  EXPECT_NE(failed.find("previous checkpoints are kept"), std::string::npos) << failed;
  EXPECT_FALSE(fs::exists(dir / "step_00000004.pt.tmp"));
  EXPECT_FALSE(fs::exists(dir / "step_00000004.pt"));
  EXPECT_EQ(checkpoints_newest_first(dir.string()).size(), 2u);
  EXPECT_NO_THROW(verify_checkpoint((dir / "step_00000002.pt").string()));
  fs::remove_all(dir);
}

// EMA tensors are stored by parameter name; checkpoints that stored them by position load too.
TEST(Checkpoint, EmaByNameAndOlderPositionalCheckpoints) {
  const fs::path dir = fs::temp_directory_path() / ("megafold_ema_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  model::ModelConfig mc = tiny_model();
  model::MegaFold m(mc);
  auto params = m->parameters();
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3));
  std::vector<at::Tensor> ema;
  for (auto& p : params) ema.push_back(torch::randn_like(p));
  const std::string path = save_checkpoint(dir.string(), {5, 1, "{}"}, *m, ema, opt, 1);
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  c10::IValue v;
  ASSERT_TRUE(archive.try_read("ema_by_name", v));
  const c10::impl::GenericDict by_name = v.toGenericDict();
  const auto named = m->named_parameters();
  ASSERT_EQ(by_name.size(), named.size());
  for (size_t i = 0; i < named.size(); ++i) EXPECT_TRUE(at::equal(by_name.at(named[i].key()).toTensor(), ema[i]));

  // The older layout: "ema" holding "0", "1", ... in parameter order.
  torch::serialize::OutputArchive old, model_archive, ema_archive, optim_archive;
  m->save(model_archive);
  for (size_t i = 0; i < ema.size(); ++i) ema_archive.write(std::to_string(i), ema[i], true);
  opt.save(optim_archive);
  old.write("model", model_archive);
  old.write("ema", ema_archive);
  old.write("optimizer", optim_archive);
  old.write("step", c10::IValue(int64_t{5}));
  old.write("seed", c10::IValue(int64_t{1}));
  old.write("config_json", c10::IValue(std::string("{}")));
  const std::string old_path = (dir / "old.pt").string();
  old.save_to(old_path);
  model::MegaFold m2(mc);
  load_weights(old_path, *m2, /*ema=*/true);
  const auto params2 = m2->parameters();
  for (size_t i = 0; i < params2.size(); ++i) EXPECT_TRUE(at::equal(params2[i], ema[i])) << named[i].key();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace megafold::train
