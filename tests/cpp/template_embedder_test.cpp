// Template embedder (AF3 SI Alg. 16): the pair features against a float64 reference written from
// the SI (distogram, backbone frames, unit vectors, masks, the same-chain mask of the erratum),
// their invariance to the template's placement, the embedder's identities (a fresh one is the
// identity, an example without templates is left alone, absent slots and slot order do not
// matter), its gradients, and the model and config around it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/autocast.h"
#include "data/features.h"
#include "data/residue_constants.h"
#include "data/structure.h"
#include "model/model.h"
#include "model/template_embedder.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

// 3u8v cut to 5 tokens of its first chain and 4 of its second: two chains, an awkward N.
data::Batch two_chain_batch(int64_t pad_to = 0) {
  static const data::Entry e = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/3u8v.cif.gz");
  std::vector<int32_t> sel;
  for (int32_t asym : {0, 1}) {
    int taken = 0;
    for (int32_t i = 0; i < e.n_tokens() && taken < (asym == 0 ? 5 : 4); ++i)
      if (e.asym_id[i] == asym) sel.push_back(i), ++taken;
  }
  return data::make_batch({&e}, {sel}, static_cast<int>(pad_to));
}

// Random templates: atoms spread like a small protein's, about 80% of them resolved, any type.
void add_random_templates(data::Batch& b, int64_t T) {
  const int64_t B = b.size(), N = b.n_tokens();
  b.template_coords = at::randn({B, T, N, 4, 3}) * 8;
  b.template_mask = (at::rand({B, T, N, 4}) < 0.8).to(at::kFloat);
  b.template_restype = at::randint(0, data::kNumTokenTypes, {B, T, N}, at::kLong);
}

// AF3 SI Alg. 16 lines 1-4, pair by pair, in scalar type S.
template <typename S>
at::Tensor reference_features(const data::Batch& b, int64_t t, const TemplateConfig& cfg) {
  const int64_t B = b.size(), N = b.n_tokens(), K = cfg.distogram_bins;
  const auto dt = std::is_same_v<S, double> ? at::kDouble : at::kFloat;
  const at::Tensor x = b.template_coords.select(1, t).to(dt).contiguous();
  const at::Tensor m = b.template_mask.select(1, t).to(dt).contiguous();
  auto X = x.accessor<S, 4>();
  auto M = m.accessor<S, 3>();
  at::Tensor out = at::zeros({B, N, N, K + 5}, at::TensorOptions().dtype(dt));
  auto O = out.accessor<S, 4>();
  auto sub = [](const S* a, const S* c, S* r) { for (int k = 0; k < 3; ++k) r[k] = a[k] - c[k]; };
  auto dot = [](const S* a, const S* c) { return a[0] * c[0] + a[1] * c[1] + a[2] * c[2]; };
  for (int64_t e = 0; e < B; ++e)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        if (b.asym_id[e][i].item<int64_t>() != b.asym_id[e][j].item<int64_t>()) continue;
        S at_i[4][3], at_j[4][3];
        for (int a = 0; a < 4; ++a)
          for (int k = 0; k < 3; ++k) at_i[a][k] = X[e][i][a][k], at_j[a][k] = X[e][j][a][k];
        const S pb = M[e][i][3] * M[e][j][3];
        const S bb = M[e][i][0] * M[e][i][1] * M[e][i][2] * M[e][j][0] * M[e][j][1] * M[e][j][2];
        S d3[3];
        sub(at_i[3], at_j[3], d3);
        const S d = std::sqrt(dot(d3, d3));
        for (int64_t k = 0; k < K; ++k) {
          const S lo = cfg.distogram_min + (cfg.distogram_max - cfg.distogram_min) * S(k) / S(K - 1);
          const S hi = k + 1 < K ? cfg.distogram_min + (cfg.distogram_max - cfg.distogram_min) * S(k + 1) / S(K - 1)
                                 : S(1e30);
          O[e][i][j][k] = (d > lo && d <= hi) ? pb : S(0);
        }
        O[e][i][j][K] = bb;
        // Frame of i: e1 along C - CA, e2 from N - CA (Gram-Schmidt), e3 = e1 x e2.
        S e1[3], v2[3], e2[3], e3[3], v[3];
        sub(at_i[2], at_i[1], e1);
        const S n1 = std::sqrt(dot(e1, e1));
        for (S& c : e1) c /= n1;
        sub(at_i[0], at_i[1], v2);
        const S p = dot(e1, v2);
        for (int k = 0; k < 3; ++k) e2[k] = v2[k] - p * e1[k];
        const S n2 = std::sqrt(dot(e2, e2));
        for (S& c : e2) c /= n2;
        e3[0] = e1[1] * e2[2] - e1[2] * e2[1];
        e3[1] = e1[2] * e2[0] - e1[0] * e2[2];
        e3[2] = e1[0] * e2[1] - e1[1] * e2[0];
        sub(at_j[1], at_i[1], v);
        S local[3] = {dot(e1, v), dot(e2, v), dot(e3, v)};
        const S len = std::sqrt(dot(local, local));
        for (int k = 0; k < 3; ++k) O[e][i][j][K + 1 + k] = len > 0 ? local[k] / len * bb : S(0);
        O[e][i][j][K + 4] = pb;
      }
  return out;
}

TEST(TemplateFeatures, MatchTheReferenceFromTheSupplement) {
  fresh_seed();
  data::Batch b = two_chain_batch(11);  // two padding tokens too
  add_random_templates(b, 2);
  const TemplateConfig cfg;
  ASSERT_EQ(template_pair_width(cfg), 44);
  for (int64_t t = 0; t < 2; ++t) {
    const at::Tensor ours = template_pair_features(b, t, cfg);
    const at::Tensor ref64 = reference_features<double>(b, t, cfg), ref32 = reference_features<float>(b, t, cfg);
    ASSERT_EQ(ours.sizes(), ref64.sizes());
    const int64_t K = cfg.distogram_bins;
    // Bins and masks are exact; the unit vectors within the derived tolerance.
    EXPECT_TRUE(at::equal(ours.narrow(-1, 0, K + 1), ref64.narrow(-1, 0, K + 1).to(at::kFloat)));
    EXPECT_TRUE(at::equal(ours.select(-1, K + 4), ref64.select(-1, K + 4).to(at::kFloat)));
    expect_within_derived_tolerance(ours.narrow(-1, K + 1, 3), ref32.narrow(-1, K + 1, 3),
                                    ref64.narrow(-1, K + 1, 3), 1e-6, "unit vectors");
    // Something of each kind is there to compare: some distances in range, some frames.
    EXPECT_GT(ours.narrow(-1, 0, K).sum().item<double>(), 0);
    EXPECT_GT(ours.select(-1, K).sum().item<double>(), 0);
    // Between chains, nothing (tokens 0-4 are chain A, 5-8 chain B).
    EXPECT_EQ(ours.narrow(1, 0, 5).narrow(2, 5, 4).abs().sum().item<double>(), 0);
  }
}

TEST(TemplateFeatures, DoNotDependOnWhereTheTemplateLies) {
  fresh_seed();
  data::Batch b = two_chain_batch();
  add_random_templates(b, 1);
  const at::Tensor q = std::get<0>(at::linalg_qr(at::randn({3, 3}, at::kDouble)));
  const at::Tensor r = (at::linalg_det(q).item<double>() < 0 ? -q : q).to(at::kFloat);  // a rotation
  data::Batch moved = b;
  moved.template_coords = at::matmul(b.template_coords, r.t()) + at::tensor({30.f, -12.f, 5.f});
  const TemplateConfig cfg;
  const int64_t K = cfg.distogram_bins;
  const at::Tensor a = template_pair_features(b, 0, cfg), c = template_pair_features(moved, 0, cfg);
  // Float32 error of each placement against its float64 features bounds the difference.
  auto err = [&](const data::Batch& x) {
    return (reference_features<float>(x, 0, cfg) - reference_features<double>(x, 0, cfg).to(at::kFloat))
        .narrow(-1, K + 1, 3).abs().max().item<double>();
  };
  // The moved coordinates are rounded to float after the rotation: that change of the input,
  // measured in float64 against the unrounded placement, adds to the difference.
  data::Batch exact = b;
  exact.template_coords = at::matmul(b.template_coords.to(at::kDouble), r.to(at::kDouble).t()) +
                          at::tensor({30.0, -12.0, 5.0}, at::kDouble);
  const double rounding = (reference_features<double>(moved, 0, cfg) - reference_features<double>(exact, 0, cfg))
                              .narrow(-1, K + 1, 3).abs().max().item<double>();
  const double tol = 2 * (err(b) + err(moved)) + rounding + 1e-6;
  EXPECT_LE((a - c).narrow(-1, K + 1, 3).abs().max().item<double>(), tol);
  EXPECT_TRUE(at::equal(a.narrow(-1, K, 1), c.narrow(-1, K, 1)));
  // Distances move by rounding only: at most a pair or two may cross a bin edge.
  EXPECT_LE((a.narrow(-1, 0, K) - c.narrow(-1, 0, K)).abs().sum().item<double>(), 4);
}

// Under bf16 autocast (the trainer's), far from the origin: the features are the fp32 ones.
TEST(TemplateFeatures, AreFloat32UnderAutocastFarFromTheOrigin) {
  fresh_seed();
  data::Batch b = two_chain_batch();
  add_random_templates(b, 1);
  b.template_coords = b.template_coords + at::tensor({300.f, -250.f, 180.f});
  const TemplateConfig cfg;
  const at::Tensor plain = template_pair_features(b, 0, cfg);
  at::Tensor mixed;
  {
    const AutocastScope ac(at::kCPU, true, at::kBFloat16);
    mixed = template_pair_features(b, 0, cfg);
  }
  EXPECT_EQ(mixed.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(mixed, plain));
  const int64_t K = cfg.distogram_bins;
  expect_within_derived_tolerance(plain.narrow(-1, K + 1, 3), reference_features<float>(b, 0, cfg).narrow(-1, K + 1, 3),
                                  reference_features<double>(b, 0, cfg).narrow(-1, K + 1, 3), 1e-6, "unit vectors");
}

ModelConfig tiny_template_config() {
  ModelConfig c;
  c.c_s = 16, c.c_z = 8, c.n_blocks = 1, c.tri_attn_heads = 2, c.tri_attn_head_dim = 4, c.tri_mul_hidden = 8;
  c.single_attn_heads = 2, c.single_attn_head_dim = 4, c.dropout = 0.0, c.msa.n_blocks = 0;
  TemplateConfig& t = c.templates;
  t.n_blocks = 2, t.c = 6, t.tri_attn_heads = 2, t.tri_attn_head_dim = 3, t.tri_mul_hidden = 5;
  return c;
}

at::Tensor pair_mask_of(const data::Batch& b) { return b.token_mask.unsqueeze(2) * b.token_mask.unsqueeze(1); }

TEST(TemplateEmbedder, StartsAsTheIdentityAndLeavesExamplesWithoutTemplatesAlone) {
  fresh_seed();
  TemplateEmbedder m(tiny_template_config());
  m->eval();
  const data::Batch one = two_chain_batch(10);
  data::Batch b = one;  // two copies of `one`
  for (at::Tensor* t : b.tensors()) *t = at::cat({*t, *t});
  add_random_templates(b, 2);
  b.template_mask[1].zero_();  // the second example has no template
  const at::Tensor z = at::randn({2, 10, 10, 8});
  const at::Tensor pm = pair_mask_of(b);
  EXPECT_TRUE(at::equal(m->forward(b, z, pm, 0), z));  // zero output weights
  randomise_parameters(*m, 0.3);
  const at::Tensor out = m->forward(b, z, pm, 0);
  EXPECT_GT((out[0] - z[0]).abs().max().item<double>(), 1e-3);
  EXPECT_TRUE(at::equal(out[1], z[1]));
  // No template slots at all: z itself.
  data::Batch none = b;
  none.template_restype = b.template_restype.narrow(1, 0, 0);
  none.template_coords = b.template_coords.narrow(1, 0, 0);
  none.template_mask = b.template_mask.narrow(1, 0, 0);
  EXPECT_TRUE(at::equal(m->forward(none, z, pm, 0), z));
}

TEST(TemplateEmbedder, AbsentSlotsAndSlotOrderDoNotMatter) {
  fresh_seed();
  TemplateEmbedder m(tiny_template_config());
  randomise_parameters(*m, 0.3);
  m->eval();
  data::Batch b = two_chain_batch();
  add_random_templates(b, 2);
  const int64_t N = b.n_tokens();
  const at::Tensor z = at::randn({1, N, N, 8});
  const at::Tensor pm = pair_mask_of(b);
  // Slot order: the mean is a sum of two terms, which commutes exactly.
  data::Batch swapped = b;
  const at::Tensor order = at::tensor({1, 0}, at::kLong);
  for (at::Tensor* t : {&swapped.template_restype, &swapped.template_coords, &swapped.template_mask})
    *t = t->index_select(1, order);
  EXPECT_TRUE(at::equal(m->forward(b, z, pm, 0), m->forward(swapped, z, pm, 0)));
  // A second slot that is absent changes nothing.
  data::Batch single = b;
  for (at::Tensor* t : {&single.template_restype, &single.template_coords, &single.template_mask})
    *t = t->narrow(1, 0, 1);
  data::Batch padded = b;
  padded.template_mask = b.template_mask.clone();
  padded.template_mask.select(1, 1).zero_();
  EXPECT_TRUE(at::equal(m->forward(single, z, pm, 0), m->forward(padded, z, pm, 0)));
  // A present second slot does.
  EXPECT_FALSE(at::equal(m->forward(single, z, pm, 0), m->forward(b, z, pm, 0)));
}

TEST(TemplateEmbedder, GradientsMatchFiniteDifferencesAndCheckpointing) {
  fresh_seed();
  ModelConfig cfg = tiny_template_config();
  TemplateEmbedder plain(cfg);
  cfg.checkpoint_blocks = true;
  TemplateEmbedder recomputed(cfg);
  randomise_parameters(*plain, 0.3);
  plain->to(at::kDouble);
  recomputed->to(at::kDouble);
  copy_state(*plain, *recomputed);
  data::Batch b = two_chain_batch(10);
  add_random_templates(b, 2);
  const at::Tensor pm = pair_mask_of(b).to(at::kDouble);
  const at::Tensor z = at::randn({1, 10, 10, 8}, at::kDouble);
  // Directional derivatives of sum(out * probe) along a random direction, autograd against
  // central differences, for z and for weights of every kind (projections, the stack, norms).
  const at::Tensor probe = at::randn({1, 10, 10, 8}, at::kDouble);
  auto check = [&](at::Tensor x, const std::string& what, const std::function<at::Tensor()>& out) {
    const at::Tensor dir = at::randn_like(x);
    plain->zero_grad();
    if (x.grad().defined()) x.mutable_grad().zero_();
    (out() * probe).sum().backward();
    const double analytic = (x.grad() * dir).sum().item<double>();
    const double eps = 1e-6;
    auto sum_at = [&](double delta) {
      torch::NoGradGuard no_grad;
      x.add_(dir * delta);
      const double v = (out() * probe).sum().item<double>();
      x.sub_(dir * delta);
      return v;
    };
    const double fd = (sum_at(eps) - sum_at(-eps)) / (2 * eps);
    EXPECT_NEAR(analytic, fd, 1e-6 * (1 + std::abs(fd))) << what;
  };
  at::Tensor zx = z.clone().requires_grad_(true);
  check(zx, "z", [&] { return plain->forward(b, zx, pm, 0); });
  auto named = plain->named_parameters();
  for (const char* name : {"w_z", "w_a", "w_restype_j", "ln_v_weight", "w_out", "block_0.tri_attn_start.w_proj",
                           "block_1.tri_mul_in.w_ab"})
    check(named[name], name, [&] { return plain->forward(b, z, pm, 0); });
  // The checkpointed embedder (recomputed in backward) gives the same output and gradients.
  const at::Tensor w = at::randn({1, 10, 10, 8}, at::kDouble);
  const at::Tensor z1 = z.clone().requires_grad_(true), z2 = z.clone().requires_grad_(true);
  plain->zero_grad();
  const at::Tensor o1 = plain->forward(b, z1, pm, 0), o2 = recomputed->forward(b, z2, pm, 0);
  EXPECT_TRUE(at::equal(o1, o2));
  (o1 * w).sum().backward();
  (o2 * w).sum().backward();
  EXPECT_LE(rel_error(z2.grad(), z1.grad()), 1e-12);
  auto p2 = recomputed->named_parameters();
  for (const auto& p : plain->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
    EXPECT_LE(rel_error(p2[p.key()].grad(), p.value().grad()), 1e-12) << p.key();
  }
}

TEST(TemplateEmbedder, TheModelAddsItBeforeEveryTrunkPassAndTrainsIt) {
  fresh_seed();
  ModelConfig cfg = tiny_template_config();
  cfg.recycles = 2;
  MegaFold m(cfg);
  randomise_parameters(*m, 0.2);
  data::Batch b = two_chain_batch();
  add_random_templates(b, 3);
  data::Batch without = b;
  without.template_mask = at::zeros_like(b.template_mask);
  const TrunkOutput a = m->forward(b, 1, 2), c = m->forward(without, 1, 2);
  EXPECT_GT((a.z - c.z).abs().max().item<double>(), 1e-4);
  m->loss(b, a, 3).total.backward();
  for (const auto& p : m->named_parameters())
    if (p.key().rfind("templates.", 0) == 0) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
    }
}

TEST(TemplateEmbedder, ConfigKeysAreReadCheckedAndWritten) {
  using config::parse_config;
  const config::TrainConfig c =
      parse_config(R"({"base": "cpu-tiny", "model": {"templates": {"n_blocks": 2, "c": 32}}})", "t.json");
  EXPECT_EQ(c.model.templates.n_blocks, 2);
  EXPECT_EQ(c.model.templates.c, 32);
  EXPECT_EQ(c.model.templates.distogram_bins, 39);
  EXPECT_EQ(to_json(parse_config(to_json(c), "again")), to_json(c));
  EXPECT_NE(error_of([] { parse_config(R"({"model": {"templates": {"n_blocks": 1, "c": 0}}})", "t.json"); })
                .find("model.templates.c"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config(R"({"model": {"templates": {"n_blocks": 1, "distogram_min": 60}}})", "t.json"); })
                .find("'model.templates'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config(R"({"model": {"templates": {"blocks": 1}}})", "t.json"); }).find("blocks"),
            std::string::npos);
}

}  // namespace
}  // namespace megafold::model
