#include "model/confidence_scores.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/features.h"
#include "data/residue_constants.h"
#include "model/surface_area.h"

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

ProteinResidues protein_residues(const data::Batch& batch, int64_t b) {
  MF_CHECK(b >= 0 && b < batch.size(), "protein_residues: example ", b, " of a batch of ", batch.size());
  constexpr int S = data::kMaxAtomsPerToken;
  const int64_t N = batch.n_tokens(), A = N * S;
  const at::Tensor restype = batch.restype[b].to(at::kCPU).contiguous();
  const at::Tensor mol_type = batch.mol_type[b].to(at::kCPU).contiguous();
  const at::Tensor real = batch.token_mask[b].to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor asym = batch.asym_id[b].to(at::kCPU).contiguous();
  const at::Tensor uid = batch.ref.space_uid[b].to(at::kCPU).contiguous();
  const at::Tensor has = batch.ref.mask[b].to(at::kCPU, at::kFloat).contiguous();        // [N, S]
  const at::Tensor element = batch.ref.element[b].to(at::kCPU).contiguous();             // [N, S]
  const at::Tensor chars = batch.ref.name_chars[b].to(at::kCPU, at::kLong).contiguous();  // [N, S, 4]
  const auto t = restype.accessor<int64_t, 1>();
  const auto m = mol_type.accessor<int64_t, 1>();
  const auto r = real.accessor<float, 1>();
  const auto c = asym.accessor<int64_t, 1>();
  const auto u = uid.accessor<int64_t, 1>();
  const auto h = has.accessor<float, 2>();
  const auto e = element.accessor<int64_t, 2>();
  const auto n = chars.accessor<int64_t, 3>();
  std::vector<int64_t> atom_residue(A, -1), residue_chain;
  std::vector<double> radius(A, 0.0), max_area;
  // Tokens [i0, i1) form one residue; it counts when it has its backbone (N, CA, C, O).
  auto close = [&](int64_t i0, int64_t i1) {
    std::vector<int64_t> atoms;
    int backbone = 0;
    for (int64_t i = i0; i < i1; ++i)
      for (int s = 0; s < S; ++s) {
        if (h[i][s] <= 0 || e[i][s] == 1) continue;  // no atom, or a hydrogen (DSSP skips them)
        std::string name;
        for (int k = 0; k < 4 && n[i][s][k] > 0; ++k) name += static_cast<char>(n[i][s][k] + 32);
        backbone |= name == "N" ? 1 : name == "CA" ? 2 : name == "C" ? 4 : name == "O" ? 8 : 0;
        atoms.push_back(i * S + s);
        radius[i * S + s] = dssp_atom_radius(name);
      }
    if (backbone != 15) return;
    const int64_t residue = static_cast<int64_t>(residue_chain.size());
    for (const int64_t a : atoms) atom_residue[a] = residue;
    residue_chain.push_back(c[i0]);
    max_area.push_back(max_accessible_area(static_cast<int>(t[i0])));
  };
  int64_t start = -1;
  for (int64_t i = 0; i <= N; ++i) {
    const bool protein = i < N && r[i] > 0 && m[i] == static_cast<int64_t>(data::MolType::kProtein);
    if (start >= 0 && (!protein || c[i] != c[start] || u[i] != u[start])) close(start, i), start = -1;
    if (protein && start < 0) start = i;
  }
  // A chain's residues must be consecutive: a chain that comes back after another would be
  // windowed as two.
  std::set<int64_t> finished;
  for (size_t k = 1; k < residue_chain.size(); ++k)
    if (residue_chain[k] != residue_chain[k - 1]) {
      finished.insert(residue_chain[k - 1]);
      MF_CHECK(!finished.count(residue_chain[k]), "protein_residues: the tokens of chain (asym_id) ", residue_chain[k],
               " of example ", b, " are not consecutive");
    }
  const auto i64 = at::TensorOptions().dtype(at::kLong), f64 = at::TensorOptions().dtype(at::kDouble);
  const int64_t R = static_cast<int64_t>(residue_chain.size());
  return {at::tensor(atom_residue, i64), at::tensor(radius, f64), at::tensor(residue_chain, i64).view({R}),
          at::tensor(max_area, f64).view({R})};
}

at::Tensor residue_sasa(const at::Tensor& coords, const ProteinResidues& residues) {
  const at::Tensor atom_residue = residues.atom_residue.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor chain = residues.residue_chain.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor max_area = residues.residue_max_area.to(at::kCPU, at::kDouble).contiguous();
  const int64_t A = atom_residue.numel(), R = chain.numel();
  MF_CHECK(coords.dim() == 2 && coords.size(0) == A && coords.size(1) == 3, "residue_sasa: coords must be [A, 3] = [",
           A, ", 3] like residues.atom_residue, got ", coords.sizes());
  MF_CHECK(atom_residue.dim() == 1 && residues.atom_radius.dim() == 1 && residues.atom_radius.numel() == A,
           "residue_sasa: residues.atom_radius must be [A] = [", A, "], got ", residues.atom_radius.sizes());
  MF_CHECK(chain.dim() == 1 && max_area.dim() == 1 && max_area.numel() == R, "residue_sasa: residues.residue_max_area",
           " must be [R] = [", R, "] like residue_chain, got ", max_area.sizes());
  MF_CHECK(A == 0 || (atom_residue.min().item<int64_t>() >= -1 && atom_residue.max().item<int64_t>() < R),
           "residue_sasa: residues.atom_residue must lie in [-1, ", R, ")");
  MF_CHECK(R == 0 || max_area.min().item<double>() > 0, "residue_sasa: residues.residue_max_area must be > 0");
  const at::Tensor x = coords.to(at::kCPU, at::kDouble);
  const at::Tensor radius = residues.atom_radius.to(at::kCPU, at::kDouble);
  const at::Tensor counted = (atom_residue >= 0).nonzero().squeeze(1);
  const at::Tensor bad = (~at::isfinite(x.index_select(0, counted)).all(1)).nonzero();
  MF_CHECK(bad.numel() == 0, "residue_sasa: the coordinates of atom ",
           bad.numel() ? counted[bad[0][0].item<int64_t>()].item<int64_t>() : 0, " are not finite");
  at::Tensor sasa_sum = at::zeros({R}, at::kDouble);
  const auto ch = chain.accessor<int64_t, 1>();
  for (int64_t r0 = 0, r1 = 0; r0 < R; r0 = r1) {
    for (r1 = r0 + 1; r1 < R && ch[r1] == ch[r0];) ++r1;
    // The chain alone, as AF3 hands DSSP one chain at a time.
    const at::Tensor atoms = ((atom_residue >= r0) & (atom_residue < r1)).nonzero().squeeze(1);
    const at::Tensor sasa = solvent_accessible_area(x.index_select(0, atoms), radius.index_select(0, atoms));
    sasa_sum.narrow(0, r0, r1 - r0).index_add_(0, atom_residue.index_select(0, atoms) - r0, sasa);
  }
  return sasa_sum;
}

at::Tensor residue_rasa(const at::Tensor& coords, const ProteinResidues& residues) {
  const at::Tensor sasa = residue_sasa(coords, residues);
  // DSSP reports whole A^2 (rounded half up), which AF3 reads back before normalising.
  return at::clamp_max(at::floor(sasa + 0.5) / residues.residue_max_area.to(at::kCPU, at::kDouble), 1.0);
}

at::Tensor windowed_rasa(const at::Tensor& rasa, const at::Tensor& residue_chain, int64_t window) {
  MF_CHECK(window >= 1 && window % 2 == 1, "windowed_rasa: window must be odd and >= 1, got ", window);
  MF_CHECK(rasa.dim() == 1 && residue_chain.dim() == 1 && rasa.numel() == residue_chain.numel(),
           "windowed_rasa: rasa [R] and residue_chain [R] must match, got ", rasa.sizes(), " and ",
           residue_chain.sizes());
  const at::Tensor x = rasa.to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor chain = residue_chain.to(at::kCPU, at::kLong).contiguous();
  const int64_t R = x.numel(), half = (window - 1) / 2;
  const auto v = x.accessor<double, 1>();
  const auto ch = chain.accessor<int64_t, 1>();
  at::Tensor out = at::empty({R}, at::kDouble);
  auto o = out.accessor<double, 1>();
  for (int64_t r0 = 0, r1 = 0; r0 < R; r0 = r1) {
    for (r1 = r0 + 1; r1 < R && ch[r1] == ch[r0];) ++r1;
    const int64_t n = r1 - r0, period = 2 * (n - 1);
    // Position j of the mirrored chain (j may lie before 0 or past n - 1).
    auto at_mirrored = [&](int64_t j) {
      if (n == 1) return v[r0];
      int64_t k = ((j % period) + period) % period;
      return v[r0 + (k < n ? k : period - k)];
    };
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t j = i - half; j <= i + half; ++j) sum += at_mirrored(j);
      o[r0 + i] = sum / static_cast<double>(window);
    }
  }
  return out;
}

double fraction_disordered(const at::Tensor& coords, const ProteinResidues& residues) {
  const at::Tensor rasa = residue_rasa(coords, residues);
  if (rasa.numel() == 0) return 0.0;
  return (windowed_rasa(rasa, residues.residue_chain) > kDisorderRasaCutoff).to(at::kDouble).mean().item<double>();
}

double ranking_score(const TmScores& tm, double fraction_disordered, bool clash) {
  MF_CHECK(fraction_disordered >= 0 && fraction_disordered <= 1,
           "ranking_score: fraction_disordered must lie in [0, 1], got ", fraction_disordered);
  const double iptm = std::isnan(tm.iptm) ? tm.ptm : tm.iptm;
  return 0.8 * iptm + 0.2 * tm.ptm + 0.5 * fraction_disordered - (clash ? 100.0 : 0.0);
}

at::Tensor contact_probabilities(const at::Tensor& distogram_logits, double min, double max) {
  const int64_t bins = distogram_logits.size(-1);
  const double width = (max - min) / static_cast<double>(bins);
  // Bin k's upper edge is min + width (k + 1) (heads.h: distogram_bins).
  const int64_t below = std::clamp<int64_t>(static_cast<int64_t>(std::floor((8.0 - min) / width + 1e-9)), 0, bins);
  return at::softmax(distogram_logits.to(at::kFloat), -1).narrow(-1, 0, below).sum(-1);
}

}  // namespace megafold::model
