#include "model/confidence_scores.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace megafold::model {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bin centres of `bins` equal bins over [0, max].
at::Tensor error_bin_centres(int64_t bins, double max, const at::TensorOptions& options) {
  return (at::arange(bins, options) + 0.5) * (max / static_cast<double>(bins));
}

// score(T, pairs) of tm_scores: probs [N, N, bins] float32 on any device; in, rows_ok [N] and
// pairs [N, N] bool on the CPU. Only T's block of the probabilities is multiplied.
double tm_score(const at::Tensor& probs, const at::Tensor& centres, const at::Tensor& in, const at::Tensor& rows_ok,
                const at::Tensor& pairs) {
  const at::Tensor members = in.nonzero().squeeze(1);
  const int64_t n = members.numel();
  if (n == 0) return kNaN;
  const at::Tensor block_pairs = pairs.index_select(0, members).index_select(1, members).to(at::kDouble);
  const at::Tensor rows = rows_ok.index_select(0, members).to(at::kDouble);
  const at::Tensor per_row = block_pairs.sum(1);
  if ((per_row * rows).max().item<double>() == 0) return kNaN;
  const double d0 = 1.24 * std::cbrt(std::max(static_cast<double>(n), 19.0) - 15.0) - 1.8;
  const at::Tensor on = members.to(probs.device());
  const at::Tensor block = n == probs.size(0) ? probs : probs.index_select(0, on).index_select(1, on);
  const at::Tensor tm = at::matmul(block, (1.0 / (1.0 + (centres / d0).square())).to(probs.device()))
                            .to(at::kCPU, at::kDouble);  // [n, n]
  const at::Tensor mean = (tm * block_pairs).sum(1) / per_row.clamp_min(1);
  return at::where((per_row > 0) & (rows > 0), mean, -1.0).max().item<double>();
}

}  // namespace

at::Tensor expected_error(const at::Tensor& logits, double max) {
  const at::Tensor p = at::softmax(logits.to(at::kFloat), -1);
  return at::matmul(p, error_bin_centres(logits.size(-1), max, p.options()));
}

TmScores tm_scores(const at::Tensor& pae_logits, const at::Tensor& token_mask, const at::Tensor& frame_mask,
                   const at::Tensor& asym_id, int64_t chains, double max) {
  MF_CHECK(pae_logits.dim() == 3 && token_mask.dim() == 1 && asym_id.dim() == 1, "tm_scores: one structure at a time");
  const at::Tensor probs = at::softmax(pae_logits.to(at::kFloat), -1);
  const at::Tensor centres = error_bin_centres(probs.size(-1), max, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat);
  const at::Tensor real = token_mask.to(at::kCPU) > 0;
  const at::Tensor framed = real & (frame_mask.to(at::kCPU) > 0);
  const at::Tensor asym = asym_id.to(at::kCPU);
  const at::Tensor other_chain = asym.unsqueeze(1) != asym.unsqueeze(0);
  const at::Tensor every = at::ones_like(other_chain);
  TmScores s;
  s.ptm = tm_score(probs, centres, real, framed, every);
  s.iptm = tm_score(probs, centres, real, framed, other_chain);
  s.chain_pair_iptm = at::full({chains, chains}, kNaN, at::kDouble);
  for (int64_t c = 0; c < chains; ++c)
    for (int64_t d = c; d < chains; ++d) {
      const at::Tensor in = real & ((asym == c) | (asym == d));
      if (!(real & (asym == c)).any().item<bool>() || !(real & (asym == d)).any().item<bool>()) continue;
      const double v = tm_score(probs, centres, in, framed, c == d ? every : other_chain);
      s.chain_pair_iptm[c][d] = v;
      s.chain_pair_iptm[d][c] = v;
    }
  return s;
}

bool has_clash(const at::Tensor& coords, const at::Tensor& atom_mask, const at::Tensor& atom_chain, int64_t chains) {
  const at::Tensor present = atom_mask.to(at::kCPU) > 0;
  const at::Tensor x = coords.to(at::kCPU, at::kFloat).index({present});
  const at::Tensor chain = atom_chain.to(at::kCPU).index({present});
  const int64_t A = x.size(0);
  if (A == 0 || chains < 2) return false;
  at::Tensor clashing = at::zeros({A}, at::kBool);
  // Rows in blocks: the distances of a block of atoms against every atom at a time.
  constexpr int64_t kBlock = 256;
  for (int64_t r0 = 0; r0 < A; r0 += kBlock) {
    const int64_t rows = std::min(kBlock, A - r0);
    const at::Tensor d2 = (x.narrow(0, r0, rows).unsqueeze(1) - x.unsqueeze(0)).square().sum(-1);
    const at::Tensor hit = (d2 < 1.1f * 1.1f) & (chain.narrow(0, r0, rows).unsqueeze(1) != chain.unsqueeze(0));
    clashing.narrow(0, r0, rows).copy_(hit.any(1));
  }
  const at::Tensor atoms = at::bincount(chain, {}, chains);
  const at::Tensor clashes = at::bincount(chain.index({clashing}), {}, chains);
  return ((clashes > 100) | (clashes.to(at::kDouble) > 0.5 * atoms.to(at::kDouble))).any().item<bool>();
}

double ranking_score(const TmScores& tm, bool clash) {
  const double iptm = std::isnan(tm.iptm) ? tm.ptm : tm.iptm;
  return 0.8 * iptm + 0.2 * tm.ptm - (clash ? 100.0 : 0.0);
}

at::Tensor contact_probabilities(const at::Tensor& distogram_logits, double min, double max) {
  const int64_t bins = distogram_logits.size(-1);
  const double width = (max - min) / static_cast<double>(bins);
  // Bin k's upper edge is min + width (k + 1) (heads.h: distogram_bins).
  const int64_t below = std::clamp<int64_t>(static_cast<int64_t>(std::floor((8.0 - min) / width + 1e-9)), 0, bins);
  return at::softmax(distogram_logits.to(at::kFloat), -1).narrow(-1, 0, below).sum(-1);
}

}  // namespace megafold::model
