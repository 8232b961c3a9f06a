// The prefetching loader: batches are the same for 1, 2 and 8 worker threads and after a resume
// (they are a pure function of the step), and a failing batch is reported with its step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <string>

#include "core/check.h"
#include "core/seed.h"
#include "data/crop.h"
#include "data/dataset.h"
#include "data/loader.h"

namespace megafold::data {
namespace {

const Dataset& dataset() {
  static const Dataset ds = load_dataset(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb", true);
  return ds;
}

// The bundled entries carry no MSAs; these copies get a random 6-row MSA per chain, so the
// MSA rows the loader draws are part of what must not depend on the workers.
const Entry& with_msa(const Entry& e) {
  static std::mutex mutex;
  static std::map<std::string, Entry> copies;
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, added] = copies.try_emplace(e.name, e);
  if (added) {
    Entry& c = it->second;
    std::mt19937_64 rng(fnv1a32(e.name));
    c.msas.assign(c.n_chains(), Msa{});
    for (int ch = 0; ch < c.n_chains(); ++ch) {
      Msa& m = c.msas[ch];
      for (int t = 0; t < c.n_tokens(); ++t) m.length += c.asym_id[t] == ch;
      m.depth = 6;
      for (int t = 0; t < c.n_tokens(); ++t)
        if (c.asym_id[t] == ch) m.tokens.push_back(c.restype[t]), m.deletions.push_back(0);
      for (int64_t x = m.length; x < m.depth * m.length; ++x) {
        m.tokens.push_back(static_cast<int8_t>(rng() % 21));
        m.deletions.push_back(static_cast<uint8_t>(rng() % 3));
      }
    }
  }
  return it->second;
}

// As the trainer builds a step's batch: entries of the sample stream, mixed crops, MSA rows,
// one seed.
Batch batch_of_step(int64_t k) {
  std::vector<const Entry*> entries;
  std::vector<std::vector<int32_t>> crops;
  for (int64_t b = 0; b < 2; ++b) {
    const uint64_t g = static_cast<uint64_t>(2 * k + b);
    const Entry& e = with_msa(*dataset().sample(7, g).get());
    entries.push_back(&e);
    crops.push_back(training_crop(e, 48, {}, mix_seed(7, g)));
  }
  return make_batch(entries, crops, 48, {4, mix_seed(7, static_cast<uint64_t>(k))});
}

std::vector<Batch> run(int workers, int64_t first, int64_t end, int depth) {
  BatchPrefetcher p(batch_of_step, first, end, workers, depth, false);
  std::vector<Batch> out;
  for (int64_t k = first; k < end; ++k) out.push_back(p.next());
  return out;
}

void expect_same(const Batch& a, const Batch& b, int64_t step) {
  EXPECT_EQ(a.names, b.names) << step;
  EXPECT_TRUE(at::equal(a.restype, b.restype)) << step;
  EXPECT_TRUE(at::equal(a.residue_index, b.residue_index)) << step;
  EXPECT_TRUE(at::equal(a.atom_coords, b.atom_coords)) << step;
  EXPECT_TRUE(at::equal(a.token_mask, b.token_mask)) << step;
  EXPECT_TRUE(at::equal(a.msa, b.msa)) << step;
  EXPECT_TRUE(at::equal(a.msa_deletion, b.msa_deletion)) << step;
  EXPECT_TRUE(at::equal(a.msa_mask, b.msa_mask)) << step;
  EXPECT_TRUE(at::equal(a.profile, b.profile)) << step;
}

TEST(Loader, SameBatchesForAnyWorkerCountAndAfterResume) {
  const auto one = run(1, 0, 24, 1);
  for (const int workers : {2, 8}) {
    const auto many = run(workers, 0, 24, 6);
    for (int64_t k = 0; k < 24; ++k) expect_same(many[k], one[k], k);
  }
  const auto resumed = run(8, 11, 24, 4);  // a run resumed at step 11
  for (int64_t k = 11; k < 24; ++k) expect_same(resumed[k - 11], one[k], k);
  // Consecutive steps differ (the stream moves on), MSA rows drawn included.
  EXPECT_FALSE(at::equal(one[0].restype, one[1].restype));
  EXPECT_EQ(one[0].msa.size(1), 4);
}

// Batches handed out by DeviceBatches are the host batches, on the device (on a GPU through
// the side-stream copies, checked against batches built again on the host).
TEST(Loader, DeviceBatchesAreTheHostBatchesOnTheDevice) {
  std::vector<c10::Device> devices = {c10::Device(c10::kCPU)};
  if (at::hasCUDA()) devices.emplace_back(c10::kCUDA, 0);
  for (const c10::Device& device : devices) {
    BatchPrefetcher host(batch_of_step, 3, 9, 2, 3, device.is_cuda());
    DeviceBatches on_device(host, device, 6);
    for (int64_t k = 3; k < 9; ++k) {
      Batch b = on_device.next();
      EXPECT_EQ(b.msa.device(), device);
      for (at::Tensor* t : b.tensors()) *t = t->cpu();  // blocking copies back
      expect_same(b, batch_of_step(k), k);
    }
    EXPECT_THROW(on_device.next(), Error);
  }
}

TEST(Loader, AFailingBatchIsReportedWithItsStep) {
  BatchPrefetcher p(
      [](int64_t k) {
        if (k == 3) throw Error("entry x: broken");
        return batch_of_step(k);
      },
      0, 6, 3, 2, false);
  for (int k = 0; k < 3; ++k) p.next();
  try {
    p.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch of step 3: entry x: broken"), std::string::npos) << e.what();
  }
  p.next();  // later steps still arrive
  EXPECT_GE(p.wait_seconds(), 0.0);
}

// A sample whose preparation fails is replaced by the same other draw on every run.
TEST(Loader, FailingSamplesAreReplacedDeterministically) {
  const std::string bad = dataset().sample(3, 10).name();
  auto prepare = [&](const Entry& e, uint64_t, const CropFocus&) {
    if (e.name == bad) throw Error("entry " + e.name + ": cannot crop");
    return e.n_tokens();
  };
  const auto first = sample_or_replace(dataset(), 3, 10, prepare);
  EXPECT_NE(first.first->name, bad);
  EXPECT_EQ(first.second, first.first->n_tokens());
  EXPECT_EQ(sample_or_replace(dataset(), 3, 10, prepare).first, first.first);
  EXPECT_EQ(sample_or_replace(dataset(), 3, 11, prepare).first, dataset().sample(3, 11).get());  // others untouched
  EXPECT_THROW(sample_or_replace(dataset(), 3, 10, [](const Entry&, uint64_t, const CropFocus&) -> int { throw Error("always"); }), Error);
}

}  // namespace
}  // namespace megafold::data
