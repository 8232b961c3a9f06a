#include "model/permutation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/confidence.h"
#include "model/structure_losses.h"

namespace megafold::model {
namespace {

using data::kMaxAtomsPerToken;

struct Chain {
  std::vector<int64_t> rows;  // batch rows of its tokens, in order
  int resolved = 0;           // resolved centre atoms
};

// One example: the permutation of its rows. centres [N, 3] predicted and true (double), ok [N]
// resolved true centres of real tokens.
std::vector<int64_t> permute_example(const at::Tensor& pred, const at::Tensor& gt, const std::vector<uint8_t>& ok,
                                     const std::vector<int64_t>& asym, const std::vector<int64_t>& entity,
                                     const std::vector<int64_t>& restype, const std::vector<int64_t>& residue,
                                     const std::vector<uint8_t>& real, const std::vector<uint8_t>& ligand) {
  const int64_t N = static_cast<int64_t>(asym.size());
  std::vector<int64_t> identity(N);
  std::iota(identity.begin(), identity.end(), 0);
  std::map<int64_t, Chain> chains;
  for (int64_t i = 0; i < N; ++i)
    if (real[i]) {
      chains[asym[i]].rows.push_back(i);
      chains[asym[i]].resolved += ok[i];
    }
  // Classes of interchangeable chains: same entity, same residues row by row.
  std::vector<std::vector<int64_t>> classes;  // asym ids
  for (const auto& [id, chain] : chains) {
    auto same = [&](int64_t other) {
      const Chain& o = chains.at(other);
      if (entity[o.rows[0]] != entity[chain.rows[0]] || o.rows.size() != chain.rows.size()) return false;
      for (size_t k = 0; k < o.rows.size(); ++k)
        if (restype[o.rows[k]] != restype[chain.rows[k]] || residue[o.rows[k]] != residue[chain.rows[k]]) return false;
      return true;
    };
    auto cls = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return same(c[0]); });
    if (cls == classes.end())
      classes.push_back({id});
    else
      cls->push_back(id);
  }
  if (std::all_of(classes.begin(), classes.end(), [](const auto& c) { return c.size() < 2; })) return identity;
  // The anchor: a polymer chain if any qualifies (a ligand's few atoms are a poor reference for
  // placing the rest), of the class with the fewest copies, then the most resolved centres.
  int64_t anchor = -1;
  size_t anchor_class = 0;
  for (const bool polymers : {true, false}) {
    for (size_t c = 0; c < classes.size(); ++c)
      for (const int64_t id : classes[c]) {
        if (chains.at(id).resolved < 3 || ligand[chains.at(id).rows[0]] == polymers) continue;
        if (anchor < 0 || classes[c].size() < classes[anchor_class].size() ||
            (classes[c].size() == classes[anchor_class].size() && chains.at(id).resolved > chains.at(anchor).resolved)) {
          anchor = id;
          anchor_class = c;
        }
      }
    if (anchor >= 0) break;
  }
  if (anchor < 0) return identity;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor pred_c = pred.contiguous();
  const auto P = pred_c.accessor<double, 2>();
  double best_cost = std::numeric_limits<double>::infinity();
  std::vector<int64_t> best = identity;
  for (const int64_t target : classes[anchor_class]) {
    // Superpose the ground truth by the anchor onto the predicted chain `target`.
    at::Tensor goal = at::zeros({N, 3}, f64), weight = at::zeros({N}, f64);
    const Chain &a = chains.at(anchor), &t = chains.at(target);
    for (size_t k = 0; k < a.rows.size(); ++k) {
      goal[a.rows[k]] = pred[t.rows[k]];
      weight[a.rows[k]] = static_cast<double>(ok[a.rows[k]]);
    }
    const at::Tensor moved_t = weighted_rigid_align(gt.unsqueeze(0), goal.unsqueeze(0), weight.unsqueeze(0))[0].contiguous();
    const auto moved = moved_t.accessor<double, 2>();
    // Greedy assignment, class by class, predicted chains in order.
    std::map<int64_t, int64_t> truth_of;  // predicted chain -> ground-truth chain
    truth_of[target] = anchor;
    for (const auto& cls : classes) {
      std::vector<int64_t> free;
      for (const int64_t id : cls)
        if (id != anchor) free.push_back(id);
      for (const int64_t p : cls) {
        if (truth_of.count(p)) continue;
        double nearest = std::numeric_limits<double>::infinity();
        size_t pick = 0;
        for (size_t f = 0; f < free.size(); ++f) {
          // Centroids over the positions the ground-truth copy resolves.
          const Chain &pc = chains.at(p), &gc = chains.at(free[f]);
          double diff[3] = {0, 0, 0};
          int count = 0;
          for (size_t k = 0; k < gc.rows.size(); ++k)
            if (ok[gc.rows[k]]) {
              for (int x = 0; x < 3; ++x) diff[x] += P[pc.rows[k]][x] - moved[gc.rows[k]][x];
              ++count;
            }
          const double d = count > 0 ? std::sqrt(diff[0] * diff[0] + diff[1] * diff[1] + diff[2] * diff[2]) / count
                                     : std::numeric_limits<double>::max();
          if (d < nearest) nearest = d, pick = f;
        }
        truth_of[p] = free[pick];
        free.erase(free.begin() + static_cast<int64_t>(pick));
      }
    }
    std::vector<int64_t> perm = identity;
    for (const auto& [p, g] : truth_of)
      for (size_t k = 0; k < chains.at(p).rows.size(); ++k) perm[chains.at(p).rows[k]] = chains.at(g).rows[k];
    double cost = 0;
    for (int64_t i = 0; i < N; ++i)
      if (real[i] && ok[perm[i]])
        for (int x = 0; x < 3; ++x) cost += (P[i][x] - moved[perm[i]][x]) * (P[i][x] - moved[perm[i]][x]);
    if (cost < best_cost) best_cost = cost, best = perm;
  }
  return best;
}

template <typename T>
std::vector<T> row(const at::Tensor& x, int64_t b) {
  const at::Tensor r = x[b].contiguous();
  return std::vector<T>(r.data_ptr<T>(), r.data_ptr<T>() + r.numel());
}

}  // namespace

at::Tensor chain_permutation(const at::Tensor& x_pred, const data::Batch& batch) {
  at::NoGradGuard no_grad;
  const int64_t B = batch.size(), N = batch.n_tokens();
  MF_CHECK(x_pred.dim() == 3 && x_pred.size(0) == B && x_pred.size(1) == N * kMaxAtomsPerToken,
           "chain_permutation: x_pred must be [", B, ", ", N * kMaxAtomsPerToken, ", 3], got ", x_pred.sizes());
  const at::Tensor slot = batch.centre_slot.to(at::kCPU);
  const at::Tensor pred = slot_atoms(x_pred.detach().to(at::kCPU, at::kDouble), slot);
  const at::Tensor gt = slot_atoms(batch.atom_coords.to(at::kCPU, at::kDouble).reshape({B, -1, 3}), slot);
  const at::Tensor centre_ok =
      batch.atom_mask.to(at::kCPU).reshape({B, N, kMaxAtomsPerToken}).gather(2, slot.unsqueeze(-1)).squeeze(-1) *
      batch.token_mask.to(at::kCPU);
  const at::Tensor ok = (centre_ok > 0).to(at::kByte), real = (batch.token_mask.to(at::kCPU) > 0).to(at::kByte);
  const at::Tensor asym = batch.asym_id.to(at::kCPU), entity = batch.entity_id.to(at::kCPU);
  const at::Tensor restype = batch.restype.to(at::kCPU), residue = batch.residue_index.to(at::kCPU);
  const at::Tensor ligand = (batch.mol_type.to(at::kCPU) == static_cast<int64_t>(data::MolType::kLigand)).to(at::kByte);
  std::vector<at::Tensor> perms;
  for (int64_t b = 0; b < B; ++b)
    perms.push_back(at::tensor(permute_example(pred[b], gt[b], row<uint8_t>(ok, b), row<int64_t>(asym, b),
                                               row<int64_t>(entity, b), row<int64_t>(restype, b),
                                               row<int64_t>(residue, b), row<uint8_t>(real, b), row<uint8_t>(ligand, b)),
                               at::kLong));
  return at::stack(perms);
}

namespace {

// AF2's residue_atom_renaming_swaps: the atom pairs of a residue that its chemistry cannot tell
// apart (the swap of the names is the same molecule).
const std::vector<std::pair<std::string, std::vector<std::pair<const char*, const char*>>>>& symmetric_atoms() {
  static const std::vector<std::pair<std::string, std::vector<std::pair<const char*, const char*>>>> swaps = {
      {"ASP", {{"OD1", "OD2"}}},
      {"GLU", {{"OE1", "OE2"}}},
      {"PHE", {{"CD1", "CD2"}, {"CE1", "CE2"}}},
      {"TYR", {{"CD1", "CD2"}, {"CE1", "CE2"}}},
  };
  return swaps;
}

// [kNumTokenTypes, kMaxAtomsPerToken] int64: each slot's partner under the renaming (itself
// where it has none).
const at::Tensor& swap_table() {
  static const at::Tensor table = [] {
    at::Tensor t = at::arange(kMaxAtomsPerToken, at::kLong).repeat({data::kNumTokenTypes, 1});
    for (int type = 0; type < data::kNumResidueTypes; ++type)
      for (const auto& [name, pairs] : symmetric_atoms())
        if (data::residue_name(type) == name)
          for (const auto& [a, b] : pairs) {
            const int sa = data::atom_slot(type, a), sb = data::atom_slot(type, b);
            MF_CHECK(sa >= 0 && sb >= 0, "symmetric atoms: ", name, " lacks ", a, " or ", b);
            t[type][sa] = sb;
            t[type][sb] = sa;
          }
    return t;
  }();
  return table;
}

// Distances between the rows of x [L, 3] and y [M, 3] -> [L, M].
at::Tensor distances(const at::Tensor& x, const at::Tensor& y) {
  return (x.unsqueeze(1) - y.unsqueeze(0)).square().sum(-1).sqrt();
}

// The batch with its ground-truth token rows taken from rows source [B, N] (row i of example b
// reads row source[b][i]); every other field is the batch's.
data::Batch with_truth_rows(const data::Batch& batch, const at::Tensor& source) {
  data::Batch out = batch;
  auto rows = [&](const at::Tensor& x) {
    const at::Tensor s = source.to(x.device());
    std::vector<at::Tensor> examples;
    for (int64_t b = 0; b < batch.size(); ++b) examples.push_back(x[b].index_select(0, s[b]));
    return at::stack(examples);
  };
  out.atom_coords = rows(batch.atom_coords);
  out.atom_mask = rows(batch.atom_mask);
  out.rep_coords = rows(batch.rep_coords);
  out.rep_mask = rows(batch.rep_mask);
  out.centre_mask = rows(batch.centre_mask);  // whether the centre atom is resolved: ground truth too
  return out;
}

// The ground truth's token rows permuted by chain_permutation.
data::Batch permute_chains(const at::Tensor& x_pred, const data::Batch& batch) {
  const at::Tensor perm = chain_permutation(x_pred, batch);
  const int64_t N = batch.n_tokens();
  if (at::equal(perm, at::arange(N, perm.options()).expand_as(perm))) return batch;
  return with_truth_rows(batch, perm);
}

}  // namespace

data::Batch rename_symmetric_atoms(const at::Tensor& x_pred, const data::Batch& batch) {
  at::NoGradGuard no_grad;
  const int64_t B = batch.size(), N = batch.n_tokens(), A = N * kMaxAtomsPerToken;
  const at::Tensor restype = batch.restype.to(at::kCPU);
  // Per-atom tokens keep slot 0 (the table's identity rows for their UNK type are never swaps
  // of slot 0 anyway); padding tokens count as real types with nothing resolved.
  const at::Tensor swap = swap_table().index_select(0, restype.reshape({-1})).view({B, N, kMaxAtomsPerToken});
  const at::Tensor flat_swap = (swap + at::arange(N, at::kLong).view({1, N, 1}) * kMaxAtomsPerToken).view({B, A});
  const at::Tensor symmetric = (swap != at::arange(kMaxAtomsPerToken, at::kLong)).view({B, A});
  const at::Tensor gt = batch.atom_coords.to(at::kCPU, at::kDouble).reshape({B, A, 3});
  const at::Tensor mask = (batch.atom_mask.to(at::kCPU) * batch.token_mask.to(at::kCPU).unsqueeze(-1)).reshape({B, A}) > 0;
  const at::Tensor pred = x_pred.detach().to(at::kCPU, at::kDouble).reshape({B, A, 3});
  at::Tensor use_alt = at::zeros({B, N}, at::kBool);
  bool any = false;
  for (int64_t b = 0; b < B; ++b) {
    // Symmetric atoms whose partner is resolved too, against every resolved atom that is not
    // symmetric.
    const at::Tensor partner_ok = mask[b].index_select(0, flat_swap[b]);
    const at::Tensor amb = (symmetric[b] & mask[b] & partner_ok).nonzero().squeeze(1);
    if (amb.numel() == 0) continue;
    const at::Tensor ref = (mask[b] & ~symmetric[b]).nonzero().squeeze(1);
    if (ref.numel() == 0) continue;
    const at::Tensor p_ref = pred[b].index_select(0, ref), g_ref = gt[b].index_select(0, ref);
    at::Tensor err = at::zeros({N}, at::kDouble), err_alt = at::zeros({N}, at::kDouble);
    constexpr int64_t kChunk = 256;  // symmetric atoms at a time: [chunk, atoms] distances
    for (int64_t c0 = 0; c0 < amb.numel(); c0 += kChunk) {
      const at::Tensor atoms = amb.narrow(0, c0, std::min(kChunk, amb.numel() - c0));
      const at::Tensor d_pred = distances(pred[b].index_select(0, atoms), p_ref);
      const at::Tensor d_gt = distances(gt[b].index_select(0, atoms), g_ref);
      const at::Tensor d_alt = distances(gt[b].index_select(0, flat_swap[b].index_select(0, atoms)), g_ref);
      const at::Tensor token = at::floor_divide(atoms, kMaxAtomsPerToken);
      err.index_add_(0, token, (d_pred - d_gt).abs().sum(1));
      err_alt.index_add_(0, token, (d_pred - d_alt).abs().sum(1));
    }
    use_alt[b] = err_alt < err;
    any = any || use_alt[b].any().item<bool>();
  }
  if (!any) return batch;
  // Where a token takes the swapped naming, each slot reads its partner's coordinates and mask.
  const at::Tensor source = at::where(use_alt.unsqueeze(-1), swap, at::arange(kMaxAtomsPerToken, at::kLong));
  data::Batch out = batch;
  const at::Tensor index = source.to(batch.atom_coords.device());
  out.atom_coords = batch.atom_coords.gather(2, index.unsqueeze(-1).expand({B, N, kMaxAtomsPerToken, 3}));
  out.atom_mask = batch.atom_mask.gather(2, index);
  return out;
}

namespace {

// Automorphisms of a small labelled graph (labels [n], adjacency [n][n]) by backtracking over
// the atoms in breadth-first order, each mapped to an unused atom of its label whose bonds to
// the atoms mapped so far agree; at most `cap` of them, the identity first.
std::vector<std::vector<int>> automorphisms(const std::vector<int64_t>& label, const std::vector<std::vector<uint8_t>>& bond,
                                            int cap) {
  const int n = static_cast<int>(label.size());
  std::vector<int> order, seen(n, 0);
  for (int root = 0; root < n; ++root) {
    if (seen[root]) continue;
    seen[root] = 1;
    order.push_back(root);
    for (size_t k = order.size() - 1; k < order.size(); ++k)
      for (int j = 0; j < n; ++j)
        if (bond[order[k]][j] && !seen[j]) seen[j] = 1, order.push_back(j);
  }
  std::vector<std::vector<int>> found;
  std::vector<int> image(n, -1), used(n, 0);
  std::function<void(int)> extend = [&](int depth) {
    if (static_cast<int>(found.size()) >= cap) return;
    if (depth == n) {
      found.push_back(image);
      return;
    }
    const int a = order[depth];
    for (int b = 0; b < n; ++b) {
      if (used[b] || label[b] != label[a]) continue;
      bool fits = true;
      for (int d = 0; d < depth && fits; ++d) fits = bond[a][order[d]] == bond[b][image[order[d]]];
      if (!fits) continue;
      image[a] = b, used[b] = 1;
      extend(depth + 1);
      image[a] = -1, used[b] = 0;
    }
  };
  extend(0);
  return found;
}

}  // namespace

data::Batch permute_ligand_atoms(const at::Tensor& x_pred, const data::Batch& batch) {
  at::NoGradGuard no_grad;
  const int64_t B = batch.size(), N = batch.n_tokens(), A = N * kMaxAtomsPerToken;
  const at::Tensor pred = x_pred.detach().to(at::kCPU, at::kDouble).reshape({B, A, 3});
  const at::Tensor gt = batch.atom_coords.to(at::kCPU, at::kDouble).reshape({B, A, 3});
  const at::Tensor mask = (batch.atom_mask.to(at::kCPU) * batch.token_mask.to(at::kCPU).unsqueeze(-1)).reshape({B, A}) > 0;
  const at::Tensor mol_t = batch.mol_type.to(at::kCPU).contiguous(), uid_t = batch.ref.space_uid.to(at::kCPU).contiguous();
  const at::Tensor element_t = batch.ref.element.to(at::kCPU).select(2, 0).contiguous();
  const at::Tensor bonds_t = batch.token_bonds.to(at::kCPU).contiguous();
  const at::Tensor real_t = (batch.token_mask.to(at::kCPU) > 0).contiguous();
  const auto mol = mol_t.accessor<int64_t, 2>(), uid = uid_t.accessor<int64_t, 2>();
  const auto element = element_t.accessor<int64_t, 2>();
  const auto bonds = bonds_t.accessor<uint8_t, 3>();
  const auto real = real_t.accessor<bool, 2>();
  at::Tensor source = at::arange(N, at::kLong).repeat({B, 1});  // ground-truth token for each row
  bool any = false;
  for (int64_t b = 0; b < B; ++b) {
    // Ligand residues: per-atom ligand tokens sharing a reference conformer.
    std::map<int64_t, std::vector<int64_t>> residues;
    for (int64_t i = 0; i < N; ++i)
      if (real[b][i] && mol[b][i] == static_cast<int64_t>(data::MolType::kLigand)) residues[uid[b][i]].push_back(i);
    for (const auto& [u, rows] : residues) {
      const int n = static_cast<int>(rows.size());
      if (n < 2) continue;
      std::vector<int64_t> label(n);
      std::vector<std::vector<uint8_t>> bond(n, std::vector<uint8_t>(n, 0));
      for (int x = 0; x < n; ++x) {
        label[x] = element[b][rows[x]];
        for (int y = 0; y < n; ++y) bond[x][y] = bonds[b][rows[x]][rows[y]];
      }
      const std::vector<std::vector<int>> autos = automorphisms(label, bond, kMaxAutomorphisms);
      if (autos.size() < 2) continue;
      // Atom slots 0 of the residue's tokens; as the reference, every other resolved atom within
      // 15 A of the ligand in the ground truth (lDDT's radius: the pocket).
      const at::Tensor own = at::tensor(rows, at::kLong) * kMaxAtomsPerToken;
      at::Tensor others = mask[b].clone();
      others.index_fill_(0, own, false);
      const at::Tensor p_own = pred[b].index_select(0, own), g_own = gt[b].index_select(0, own);
      const at::Tensor own_ok = mask[b].index_select(0, own).to(at::kDouble);
      const at::Tensor candidates = others.nonzero().squeeze(1);
      const at::Tensor d_gt_all = distances(g_own, gt[b].index_select(0, candidates));
      const at::Tensor near = (d_gt_all + 1e9 * (1 - own_ok).unsqueeze(1)).amin(0) < 15.0;
      const at::Tensor ref = candidates.index({near});
      const at::Tensor d_pred_in = distances(p_own, p_own), d_gt_in = distances(g_own, g_own);
      const at::Tensor d_pred_out = distances(p_own, pred[b].index_select(0, ref));
      const at::Tensor d_gt_out = d_gt_all.index({at::indexing::Slice(), near});
      double best = std::numeric_limits<double>::infinity();
      size_t pick = 0;
      for (size_t k = 0; k < autos.size(); ++k) {
        // Row x of the prediction against ground-truth atom autos[k][x]; pairs where both are resolved.
        const at::Tensor map = at::tensor(std::vector<int64_t>(autos[k].begin(), autos[k].end()), at::kLong);
        const at::Tensor ok = own_ok.index_select(0, map);
        const at::Tensor in = (d_pred_in - d_gt_in.index_select(0, map).index_select(1, map)).abs() *
                              ok.unsqueeze(1) * ok.unsqueeze(0);
        const at::Tensor out = (d_pred_out - d_gt_out.index_select(0, map)).abs() * ok.unsqueeze(1);
        const double err = in.sum().item<double>() + out.sum().item<double>();
        if (err < best - 1e-9) best = err, pick = k;  // ties keep the earlier (the identity first)
      }
      if (pick == 0) continue;
      for (int x = 0; x < n; ++x) source[b][rows[x]] = rows[autos[pick][x]];
      any = true;
    }
  }
  // Within one ligand residue: centre_mask (polymer centres only) is zero on every row moved.
  return any ? with_truth_rows(batch, source) : batch;
}

data::Batch permute_ground_truth(const at::Tensor& x_pred, const data::Batch& batch) {
  return permute_ligand_atoms(x_pred, rename_symmetric_atoms(x_pred, permute_chains(x_pred, batch)));
}

}  // namespace megafold::model
