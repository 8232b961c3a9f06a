// MSA features for batches (unpaired assembly, seeded row subsampling, crops, gzip input) and
// the MSA module's pieces against explicit loops.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/check.h"
#include "data/features.h"
#include "data/msa.h"
#include "data/msa_features.h"
#include "data/residue_constants.h"
#include "model/embedder.h"
#include "model/msa_module.h"
#include "testing.h"

namespace megafold {
namespace {
using namespace megafold::testing;
using data::Entry;
using data::all_tokens;
using data::EntryMsa;
using data::Msa;

// Two chains of 3 and 2 tokens; chain 0 has a 4-row MSA, chain 1 a 2-row one (or none).
Entry two_chains(bool msa_for_b = true) {
  Entry e;
  e.name = "toy";
  e.restype = {1, 2, 3, 4, 5};
  e.residue_index = {1, 2, 3, 1, 2};
  e.asym_id = {0, 0, 0, 1, 1};
  e.entity_id = {1, 1, 1, 2, 2};
  e.sym_id = {0, 0, 0, 0, 0};
  e.coords.assign(5 * data::kMaxAtomsPerToken * 3, 0.f);
  e.atom_mask.assign(5 * data::kMaxAtomsPerToken, 0);
  e.fill_residue_defaults();
  e.chain_ids = {"A", "B"};
  Msa a;
  a.depth = 4, a.length = 3;
  a.tokens = {1, 2, 3, 6, 2, 7, 1, data::kGapToken, 8, 9, 9, 9};
  a.deletions = {0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 5};
  Msa b;
  if (msa_for_b) {
    b.depth = 2, b.length = 2;
    b.tokens = {4, 5, 10, 5};
    b.deletions = {0, 0, 3, 0};
  }
  e.msas = {a, b};
  return e;
}

TEST(MsaFeatures, UnpairedRowsSitInTheirChainsColumns) {
  const Entry e = two_chains();
  const EntryMsa m = data::entry_msa(e, all_tokens(e), {100, 7});
  ASSERT_EQ(m.rows, 1 + 3 + 1);  // the query, then chain A's rows 1-3 and chain B's row 1
  const int8_t G = data::kGapToken;
  const std::vector<int8_t> want = {1, 2, 3, 4, 5,   6, 2, 7, G, G,   1, G, 8, G, G,
                                    9, 9, 9, G, G,   G, G, G, 10, 5};
  EXPECT_EQ(m.tokens, want);
  EXPECT_EQ(m.deletions[1 * 5 + 0], 1.f);
  EXPECT_EQ(m.deletions[2 * 5 + 1], 2.f);
  EXPECT_EQ(m.deletions[3 * 5 + 2], 5.f);
  EXPECT_EQ(m.deletions[4 * 5 + 3], 3.f);
  // Profiles over each chain's full MSA: column 0 of chain A holds types 1, 6, 1, 9.
  EXPECT_FLOAT_EQ(m.profile[0 * data::kNumTokenTypes + 1], 0.5f);
  EXPECT_FLOAT_EQ(m.profile[0 * data::kNumTokenTypes + 6], 0.25f);
  EXPECT_FLOAT_EQ(m.deletion_mean[0], 0.25f);
  EXPECT_FLOAT_EQ(m.deletion_mean[3], 1.5f);
}

TEST(MsaFeatures, SpeciesComeFromUniProtAndUniRefHeaders) {
  using data::species_of_header;
  const uint64_t human = species_of_header(">tr|A0A024R161|A0A024R161_HUMAN Guanine OS=Homo sapiens OX=9606 GN=DNAJC25");
  EXPECT_NE(human, 0u);
  EXPECT_EQ(species_of_header(">sp|P69905|HBA_HUMAN Hemoglobin OX=9606"), human);
  EXPECT_EQ(species_of_header(">UniRef100_P69905 Hemoglobin n=1 Tax=Homo sapiens TaxID=9606 RepID=HBA_HUMAN"), human);
  EXPECT_NE(species_of_header(">sp|P01942|HBA_MOUSE Hemoglobin OX=10090"), human);
  // Entry-name mnemonics where no taxonomy id is given (a key of their own).
  const uint64_t bact = species_of_header(">tr|A0A0X1|A0A0X1_9BACT some protein");
  EXPECT_NE(bact, 0u);
  EXPECT_EQ(species_of_header(">A0A0X2_9BACT"), bact);
  EXPECT_NE(species_of_header(">P12345_HUMAN"), human);  // a mnemonic is not a taxonomy id
  for (const char* none : {">query", ">101m_A mol:protein length:154", ">seq_1", ">x OX=", ">UniRef90_X1 n=2"})
    EXPECT_EQ(species_of_header(none), 0u) << none;
}

// Hand-made a3m files of two different chains: rows of the same species pair up in one row
// (best-ranked first), the rest stay unpaired after them, the query pairs with nothing.
TEST(MsaFeatures, RowsOfOneSpeciesArePairedAcrossChains) {
  Entry e = two_chains();
  const Msa a = data::parse_a3m(">query\nACD\n>tr|X1|X1_MOUSE OX=10090\nACE\n>tr|X2|X2_HUMAN OX=9606\nAGD\n"
                                ">tr|X3|X3_YEAST OX=4932\nVCD\n>tr|X4|X4_HUMAN OX=9606\nWCD\n",
                                "a.a3m");
  const Msa b = data::parse_a3m(">query\nEF\n>tr|Y1|Y1_HUMAN OX=9606\nEY\n>tr|Y2|Y2_ECOLI OX=562\nQF\n"
                                ">tr|Y3|Y3_MOUSE OX=10090\nEH\n",
                                "b.a3m");
  e.restype = {a.tokens[0], a.tokens[1], a.tokens[2], b.tokens[0], b.tokens[1]};
  e.msas = {a, b};
  const EntryMsa m = data::entry_msa(e, all_tokens(e), {100, 3});
  // query; paired HUMAN (A row 2, B row 1: mean rank 1.5) then MOUSE (A row 1, B row 3: 2);
  // unpaired: A's YEAST (3), A's second HUMAN (4), B's ECOLI (2).
  ASSERT_EQ(m.rows, 1 + 2 + 3);
  const int8_t G = data::kGapToken;
  auto row_of = [&](const Msa& msa, int r, int len) {
    return std::vector<int8_t>(msa.tokens.begin() + r * len, msa.tokens.begin() + (r + 1) * len);
  };
  auto row = [&](int k) { return std::vector<int8_t>(m.tokens.begin() + k * 5, m.tokens.begin() + (k + 1) * 5); };
  auto cat = [](std::vector<int8_t> x, const std::vector<int8_t>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  EXPECT_EQ(row(1), cat(row_of(a, 2, 3), row_of(b, 1, 2)));
  EXPECT_EQ(row(2), cat(row_of(a, 1, 3), row_of(b, 3, 2)));
  EXPECT_EQ(row(3), cat(row_of(a, 3, 3), {G, G}));
  EXPECT_EQ(row(4), cat(row_of(a, 4, 3), {G, G}));
  EXPECT_EQ(row(5), cat({G, G, G}, row_of(b, 2, 2)));
  // Subsampled, a pair stays a pair: every kept row is whole.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const EntryMsa few = data::entry_msa(e, all_tokens(e), {3, seed});
    ASSERT_EQ(few.rows, 3);
    for (int k = 1; k < 3; ++k) {
      const std::vector<int8_t> r(few.tokens.begin() + k * 5, few.tokens.begin() + (k + 1) * 5);
      bool found = false;
      for (int j = 1; j < m.rows; ++j) found = found || r == row(j);
      EXPECT_TRUE(found) << "seed " << seed << " row " << k;
    }
  }
  // Copies of one entity do not pair with each other.
  e.entity_id = {1, 1, 1, 1, 1};
  EXPECT_EQ(data::entry_msa(e, all_tokens(e), {100, 3}).rows, 1 + 4 + 3);
}

TEST(MsaFeatures, ChainsWithoutMsaAreSingleSequence) {
  const Entry e = two_chains(false);
  const EntryMsa m = data::entry_msa(e, all_tokens(e), {100, 0});
  EXPECT_EQ(m.rows, 4);
  for (int i = 3; i < 5; ++i) {
    for (int t = 0; t < data::kNumTokenTypes; ++t)
      EXPECT_EQ(m.profile[i * data::kNumTokenTypes + t], t == e.restype[i] ? 1.f : 0.f);
    EXPECT_EQ(m.deletion_mean[i], 0.f);
  }
  Entry bare = e;
  bare.msas.clear();
  EXPECT_EQ(data::entry_msa(bare, all_tokens(bare), {100, 0}).rows, 1);
}

TEST(MsaFeatures, SubsamplingKeepsTheQueryAndIsAPureFunctionOfTheSeed) {
  const Entry e = two_chains();
  const EntryMsa full = data::entry_msa(e, all_tokens(e), {100, 0});
  std::set<std::vector<int8_t>> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const EntryMsa m = data::entry_msa(e, all_tokens(e), {3, seed});
    ASSERT_EQ(m.rows, 3);
    EXPECT_EQ(m.tokens, data::entry_msa(e, all_tokens(e), {3, seed}).tokens);
    EXPECT_TRUE(std::equal(m.tokens.begin(), m.tokens.begin() + 5, full.tokens.begin()));  // the query
    // Each kept row is a row of the full MSA, in the full MSA's order, without repeats.
    int last = 0;
    for (int r = 1; r < m.rows; ++r) {
      int found = -1;
      for (int f = 1; f < full.rows; ++f)
        if (std::equal(m.tokens.begin() + r * 5, m.tokens.begin() + r * 5 + 5, full.tokens.begin() + f * 5)) found = f;
      ASSERT_GT(found, last);
      last = found;
    }
    EXPECT_EQ(m.profile, full.profile);  // the profile does not depend on the draw
    seen.insert(m.tokens);
  }
  EXPECT_EQ(seen.size(), 6u);  // all C(4, 2) pairs of the 4 other rows turn up
  EXPECT_THROW(data::entry_msa(e, all_tokens(e), {0, 0}), Error);
}

TEST(MsaFeatures, CropsKeepTheirColumns) {
  const Entry e = two_chains();
  const std::vector<int32_t> crop = {1, 2, 4};
  const EntryMsa direct = data::entry_msa(e, crop, {100, 3});
  const Entry sub = data::select_tokens(e, crop);
  const EntryMsa via = data::entry_msa(sub, all_tokens(sub), {100, 3});
  EXPECT_EQ(direct.tokens, via.tokens);
  EXPECT_EQ(direct.deletions, via.deletions);
  EXPECT_EQ(direct.profile, via.profile);
  // Stored profiles (msa_for_chain, the cache) are cropped with their columns.
  Entry stored = e;
  for (Msa& m : stored.msas) {
    data::MsaProfile p = data::msa_profile(m);
    m.profile = p.profile, m.deletion_mean = p.deletion_mean;
  }
  const Entry sub_stored = data::select_tokens(stored, crop);
  const EntryMsa via_stored = data::entry_msa(sub_stored, all_tokens(sub_stored), {100, 3});
  EXPECT_EQ(via_stored.profile, direct.profile);
  EXPECT_EQ(via_stored.deletion_mean, direct.deletion_mean);
}

TEST(MsaFeatures, BatchPadsRowsAndTokensWithMaskZero) {
  const Entry a = two_chains(), b = two_chains(false);
  const data::Batch batch = data::make_batch({&a, &b}, {{0, 1, 3}, {}}, 6, {100, 5});
  ASSERT_EQ(batch.msa.sizes(), (std::vector<int64_t>{2, 5, 6}));
  EXPECT_EQ(batch.msa_mask[0].sum().item<float>(), 5 * 3);  // 5 rows x 3 tokens
  EXPECT_EQ(batch.msa_mask[1].sum().item<float>(), 4 * 5);  // 4 rows x 5 tokens
  EXPECT_TRUE(at::all(batch.msa[0].narrow(1, 3, 3) == data::kGapToken).item<bool>());
  EXPECT_TRUE(at::all(batch.msa[1][4] == data::kGapToken).item<bool>());  // a padding row
  EXPECT_EQ(batch.profile.sizes(), (std::vector<int64_t>{2, 6, data::kNumTokenTypes}));
  EXPECT_FLOAT_EQ(batch.profile[0].sum(-1)[0].item<float>(), 1.f);
  EXPECT_FLOAT_EQ(batch.profile[0].sum(-1)[5].item<float>(), 0.f);  // padding
  // Entry b's draw is seeded apart from entry a's: the same entry in both slots may differ.
  const data::Batch twice = data::make_batch({&a, &a}, {{}, {}}, 0, {3, 1});
  EXPECT_EQ(twice.msa.size(1), 3);
}

TEST(MsaFeatures, GzipA3mReadsLikePlain) {
  const std::string text = ">q\nMKTA\n>h\n-KabTA\n";
  const auto dir = std::filesystem::temp_directory_path();
  const std::string plain = (dir / "megafold_msa_test.a3m").string(), gz = plain + ".gz";
  std::ofstream(plain) << text;
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  const Msa p = data::load_a3m(plain), z = data::load_a3m(gz);
  EXPECT_EQ(p.tokens, z.tokens);
  EXPECT_EQ(p.deletions, z.deletions);
  // A truncated gzip stream is an error that names the file.
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(gz, std::ios::binary) << bytes.substr(0, bytes.size() - 9);
  try {
    data::load_a3m(gz);
    ADD_FAILURE() << "truncated gzip accepted";
  } catch (const Error& ex) {
    EXPECT_NE(std::string(ex.what()).find(gz), std::string::npos) << ex.what();
  }
  std::filesystem::remove(plain);
  std::filesystem::remove(gz);
}

TEST(MsaModule, OuterProductMeanMatchesLoops) {
  fresh_seed();
  const int64_t B = 1, S = 4, N = 5, c_m = 6, c = 3, c_z = 4;
  model::OuterProductMean opm(c_m, c, c_z);
  randomise_parameters(*opm);
  opm->to(at::kDouble);
  const at::Tensor m = at::randn({B, S, N, c_m}, at::kDouble);
  at::Tensor mask = at::ones({B, S, N}, at::kDouble);
  mask[0][3].fill_(0);     // a padding row
  mask[0][2][4] = 0;       // a row absent at one token
  const at::Tensor out = opm(m, mask);
  // Reference: LayerNorm, projections, mean over the rows present at both tokens.
  const auto params = opm->named_parameters();
  const at::Tensor x = at::layer_norm(m, {c_m}, params["ln_weight"], params["ln_bias"]);
  const at::Tensor ab = at::linear(x, params["w_ab"]);
  at::Tensor ref = at::zeros({B, N, N, c_z}, at::kDouble);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j) {
      at::Tensor acc = at::zeros({c * c}, at::kDouble);
      double rows = 0;
      for (int64_t s = 0; s < S; ++s) {
        const double w = mask[0][s][i].item<double>() * mask[0][s][j].item<double>();
        acc += w * at::outer(ab[0][s][i].narrow(0, 0, c), ab[0][s][j].narrow(0, c, c)).reshape({c * c});
        rows += w;
      }
      ref[0][i][j] = at::linear(acc / std::max(rows, 1.0), params["w_o"], params["b_o"]);
    }
  EXPECT_LT(rel_error(out, ref), 1e-12);
}

TEST(MsaModule, PairWeightedAveragingMatchesLoopsAndIgnoresPaddedKeys) {
  fresh_seed();
  const int64_t B = 1, S = 3, N = 5, c_m = 6, c_z = 4, H = 2, c = 3;
  model::MsaPairWeightedAveraging pwa(c_m, c_z, H, c);
  randomise_parameters(*pwa);
  pwa->to(at::kDouble);
  const at::Tensor m = at::randn({B, S, N, c_m}, at::kDouble), z = at::randn({B, N, N, c_z}, at::kDouble);
  at::Tensor token_mask = at::ones({B, N}, at::kDouble);
  token_mask[0][4] = 0;
  const at::Tensor out = pwa(m, z, token_mask);
  const auto p = pwa->named_parameters();
  const at::Tensor x = at::layer_norm(m, {c_m}, p["ln_m_weight"], p["ln_m_bias"]);
  const at::Tensor vg = at::linear(x, p["w_vg"]);
  const at::Tensor bias = at::linear(at::layer_norm(z, {c_z}, p["ln_z_weight"], p["ln_z_bias"]), p["w_b"]);
  at::Tensor o = at::zeros({B, S, N, H * c}, at::kDouble);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < N; ++i) {
      const at::Tensor w = at::softmax(bias[0][i].select(-1, h).narrow(0, 0, 4), 0);  // real keys 0-3
      for (int64_t s = 0; s < S; ++s) {
        at::Tensor acc = at::zeros({c}, at::kDouble);
        for (int64_t j = 0; j < 4; ++j) acc += w[j] * vg[0][s][j].narrow(0, h * c, c);
        o[0][s][i].narrow(0, h * c, c).copy_(acc * at::sigmoid(vg[0][s][i].narrow(0, H * c + h * c, c)));
      }
    }
  EXPECT_LT(rel_error(out, at::linear(o, p["w_o"])), 1e-12);
}

model::ModelConfig msa_config() {
  model::ModelConfig c;
  c.c_s = 16, c.c_z = 8, c.n_blocks = 1, c.tri_attn_heads = 2, c.tri_attn_head_dim = 4, c.tri_mul_hidden = 8;
  c.single_attn_heads = 2, c.single_attn_head_dim = 4, c.dropout = 0;
  c.msa.n_blocks = 2, c.msa.c_m = 8, c.msa.opm_hidden = 4, c.msa.heads = 2, c.msa.head_dim = 4;
  return c;
}

TEST(MsaModule, PaddingRowsChangeNothingAndEveryParameterLearns) {
  fresh_seed();
  model::MsaModule msa(msa_config());
  randomise_parameters(*msa);
  const Entry e = two_chains();
  const data::Batch b = data::make_batch({&e}, {{}}, 7, {100, 2});
  const int64_t N = 7;
  const at::Tensor s_inputs = at::randn({1, N, model::s_inputs_width(msa_config())});
  const at::Tensor z = at::randn({1, N, N, 8});
  const at::Tensor pair_mask = b.token_mask.unsqueeze(2) * b.token_mask.unsqueeze(1);
  const at::Tensor out = msa(b, s_inputs, z, pair_mask, 0);
  ASSERT_EQ(out.sizes(), z.sizes());
  // Two more rows of padding (mask 0) leave every real pair as it was.
  data::Batch padded = b;
  padded.msa = at::cat({b.msa, at::full({1, 2, N}, data::kGapToken, b.msa.options())}, 1);
  padded.msa_deletion = at::cat({b.msa_deletion, at::ones({1, 2, N})}, 1);
  padded.msa_mask = at::cat({b.msa_mask, at::zeros({1, 2, N})}, 1);
  const at::Tensor out2 = msa(padded, s_inputs, z, pair_mask, 0);
  EXPECT_LT(rel_error(out2.narrow(1, 0, 5).narrow(2, 0, 5), out.narrow(1, 0, 5).narrow(2, 0, 5)), 1e-5);
  // Every parameter reaches the output (the last block has no MSA update to train).
  (out * at::randn_like(out)).sum().backward();
  for (const auto& p : msa->named_parameters())
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
}

TEST(MsaModule, CheckpointedBlocksGiveTheSameOutputAndGradients) {
  fresh_seed();
  model::ModelConfig cfg = msa_config();
  cfg.msa.dropout = 0.3;  // masks must be redrawn identically in the recomputation
  model::MsaModule plain(cfg);
  randomise_parameters(*plain);
  cfg.checkpoint_blocks = true;
  model::MsaModule ckpt(cfg);
  {
    torch::NoGradGuard g;
    auto src = plain->parameters(), dst = ckpt->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  const Entry e = two_chains();
  const data::Batch b = data::make_batch({&e}, {{}}, 6, {100, 4});
  const at::Tensor pair_mask = b.token_mask.unsqueeze(2) * b.token_mask.unsqueeze(1);
  const at::Tensor s_inputs = at::randn({1, 6, model::s_inputs_width(cfg)}), z = at::randn({1, 6, 6, 8});
  const at::Tensor w = at::randn({1, 6, 6, 8});
  const at::Tensor out1 = plain(b, s_inputs, z, pair_mask, 9), out2 = ckpt(b, s_inputs, z, pair_mask, 9);
  EXPECT_TRUE(at::equal(out1, out2));
  (out1 * w).sum().backward();
  (out2 * w).sum().backward();
  auto p1 = plain->parameters(), p2 = ckpt->parameters();
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_LT(rel_error(p2[i].grad(), p1[i].grad()), 1e-6) << "parameter " << i;
}

}  // namespace
}  // namespace megafold
