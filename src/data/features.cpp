#include "data/features.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/seed.h"
#include "data/reference_atoms.h"

namespace megafold::data {
ReferenceFeatures reference_features(const at::Tensor& restype) {
  MF_CHECK(restype.dim() == 2, "reference_features: restype must be [B, N], got ", restype.sizes());
  // Lookup tables [kNumTokenTypes, kMaxAtomsPerToken, ...] on the CPU, built once.
  static const std::array<at::Tensor, 5> tables = [] {
    constexpr int T = kNumTokenTypes, A = kMaxAtomsPerToken;
    std::vector<float> pos(T * A * 3, 0.f), charge(T * A, 0.f), mask(T * A, 0.f);
    std::vector<int64_t> element(T * A, 0), chars(T * A * 4, 0);
    const ReferenceTable& ref = reference_atoms();
    for (int t = 0; t < kNumResidueTypes; ++t)
      for (int a = 0; a < A; ++a) {
        const ReferenceAtom& r = ref[t][a];
        const int k = t * A + a;
        element[k] = r.element;
        charge[k] = static_cast<float>(r.charge);
        mask[k] = r.element > 0 ? 1.f : 0.f;
        for (int c = 0; c < 3; ++c) pos[3 * k + c] = r.pos[c];
        const std::string_view name = atom_names(t)[a];
        for (size_t c = 0; c < name.size() && c < 4; ++c) chars[4 * k + c] = (name[c] - 32) & 63;
      }
    auto f32 = at::TensorOptions().dtype(at::kFloat);
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    return std::array<at::Tensor, 5>{at::from_blob(pos.data(), {T, A, 3}, f32).clone(),
                                     at::from_blob(element.data(), {T, A}, i64).clone(),
                                     at::from_blob(charge.data(), {T, A}, f32).clone(),
                                     at::from_blob(mask.data(), {T, A}, f32).clone(),
                                     at::from_blob(chars.data(), {T, A, 4}, i64).clone()};
  }();
  MF_CHECK(restype.numel() == 0 || (restype.min().item<int64_t>() >= 0 && restype.max().item<int64_t>() < kNumTokenTypes),
           "reference_features: token types must lie in [0, ", kNumTokenTypes, ")");
  const at::Tensor idx = restype.reshape({-1});
  auto gather = [&](const at::Tensor& table) {
    at::Tensor g = table.to(restype.device()).index_select(0, idx);
    std::vector<int64_t> shape = restype.sizes().vec();
    for (int64_t d = 1; d < table.dim(); ++d) shape.push_back(table.size(d));
    return g.view(shape);
  };
  const at::Tensor uid = at::arange(restype.numel(), restype.options()).view(restype.sizes());
  return {gather(tables[0]), gather(tables[1]), gather(tables[2]), gather(tables[3]), gather(tables[4]), uid};
}

namespace {

// reference_features of the token types, then per-atom tokens' own atoms and the shared
// conformer ids of per-atom residues.
ReferenceFeatures batch_reference_features(const std::vector<const Entry*>& entries,
                                           const std::vector<std::vector<int32_t>>& sels, const at::Tensor& restype) {
  ReferenceFeatures f = reference_features(restype);
  auto pos = f.pos.accessor<float, 4>();
  auto element = f.element.accessor<int64_t, 3>();
  auto charge = f.charge.accessor<float, 3>();
  auto mask = f.mask.accessor<float, 3>();
  auto chars = f.name_chars.accessor<int64_t, 4>();
  auto uid = f.space_uid.accessor<int64_t, 2>();
  for (size_t b = 0; b < entries.size(); ++b) {
    const Entry& e = *entries[b];
    const std::vector<int32_t>& sel = sels[b];
    int64_t next_uid = 0;
    for (size_t i = 0; i < sel.size(); ++i) {
      const int t = sel[i];
      const bool shares = i > 0 && e.per_atom(t) && e.per_atom(sel[i - 1]) && e.asym_id[t] == e.asym_id[sel[i - 1]] &&
                          e.residue_index[t] == e.residue_index[sel[i - 1]];
      uid[b][i] = shares ? next_uid - 1 : next_uid++;
      if (!e.per_atom(t)) continue;
      const TokenAtom& a = e.token_atoms[t];
      for (int s = 0; s < kMaxAtomsPerToken; ++s) {
        element[b][i][s] = s == 0 ? a.element : 0;
        charge[b][i][s] = s == 0 ? a.charge : 0.f;
        mask[b][i][s] = s == 0 ? 1.f : 0.f;
        for (int x = 0; x < 3; ++x) pos[b][i][s][x] = s == 0 ? a.ref_pos[x] : 0.f;
        const std::string_view name = s == 0 ? a.atom_name() : std::string_view();
        for (size_t c = 0; c < 4; ++c) chars[b][i][s][c] = c < name.size() ? (name[c] - 32) & 63 : 0;
      }
    }
    for (int64_t i = static_cast<int64_t>(sel.size()); i < restype.size(1); ++i) uid[b][i] = next_uid++;
  }
  return f;
}

// Batch::frame_atoms and frame_mask of the selected tokens; per-atom tokens' neighbours from
// the reference features (positions and conformer ids) of the batch.
void token_frames(const std::vector<const Entry*>& entries, const std::vector<std::vector<int32_t>>& sels, Batch& out) {
  constexpr int A = kMaxAtomsPerToken;
  constexpr double kMinAngle = 25.0 * 3.14159265358979323846 / 180.0;
  const int64_t B = out.size(), N = out.n_tokens();
  out.frame_atoms = at::zeros({B, N, 3}, at::kLong);
  out.frame_mask = at::zeros({B, N}, at::kFloat);
  auto frame = out.frame_atoms.accessor<int64_t, 3>();
  auto has = out.frame_mask.accessor<float, 2>();
  auto pos = out.ref.pos.accessor<float, 4>();
  auto uid = out.ref.space_uid.accessor<int64_t, 2>();
  auto distance2 = [&](int64_t b, int64_t i, int64_t j) {
    double d = 0;
    for (int x = 0; x < 3; ++x) {
      const double t = double(pos[b][i][0][x]) - pos[b][j][0][x];
      d += t * t;
    }
    return d;
  };
  for (int64_t b = 0; b < B; ++b) {
    const Entry& e = *entries[b];
    const std::vector<int32_t>& sel = sels[b];
    const int64_t n = static_cast<int64_t>(sel.size());
    for (int64_t i = 0; i < n; ++i) {
      if (!e.per_atom(sel[i])) {
        const std::array<int, 3> slots = frame_atom_slots(e.restype[sel[i]]);
        if (slots[0] < 0 || slots[1] < 0 || slots[2] < 0) continue;
        for (int k = 0; k < 3; ++k) frame[b][i][k] = i * A + slots[k];
        has[b][i] = 1.f;
        continue;
      }
      // The two nearest atoms of the same conformer (one run of rows: batch_reference_features
      // numbers a per-atom residue's consecutive tokens alike), ties to the lower row.
      int64_t lo = i, hi = i;
      while (lo > 0 && uid[b][lo - 1] == uid[b][i]) --lo;
      while (hi + 1 < n && uid[b][hi + 1] == uid[b][i]) ++hi;
      int64_t first = -1, second = -1;
      double d_first = 0, d_second = 0;
      for (int64_t j = lo; j <= hi; ++j) {
        if (j == i) continue;
        const double d = distance2(b, i, j);
        if (first < 0 || d < d_first) {
          second = first, d_second = d_first;
          first = j, d_first = d;
        } else if (second < 0 || d < d_second) {
          second = j, d_second = d;
        }
      }
      if (second < 0) continue;
      std::array<double, 3> u{}, v{};
      for (int x = 0; x < 3; ++x) {
        u[x] = double(pos[b][first][0][x]) - pos[b][i][0][x];
        v[x] = double(pos[b][second][0][x]) - pos[b][i][0][x];
      }
      const double cosine = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) /
                            std::sqrt((u[0] * u[0] + u[1] * u[1] + u[2] * u[2]) * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]));
      if (!(std::abs(cosine) <= std::cos(kMinAngle))) continue;  // within 25 degrees of a line (or NaN)
      frame[b][i][0] = first * A;
      frame[b][i][1] = i * A;
      frame[b][i][2] = second * A;
      has[b][i] = 1.f;
    }
  }
}

}  // namespace

std::vector<int32_t> all_tokens(const Entry& e) {
  std::vector<int32_t> all(e.n_tokens());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

Entry select_tokens(const Entry& e, const std::vector<int32_t>& tokens) {
  Entry out = e;
  out.restype.clear(), out.residue_index.clear(), out.author_index.clear(), out.insertion_codes.clear();
  out.asym_id.clear(), out.entity_id.clear(), out.sym_id.clear(), out.coords.clear(), out.atom_mask.clear();
  out.mol_type.clear(), out.component.clear(), out.token_atoms.clear(), out.bonds.clear();
  const bool author = e.author_index.size() == e.restype.size();
  std::vector<int32_t> new_index(e.n_tokens(), -1);
  for (const int32_t i : tokens) {
    MF_CHECK(i >= 0 && i < e.n_tokens(), "select_tokens: token ", i, " is outside ", e.name, " (", e.n_tokens(),
             " tokens)");
    new_index[i] = out.n_tokens();
    out.restype.push_back(e.restype[i]);
    out.mol_type.push_back(e.mol_type[i]);
    out.component.push_back(e.component[i]);
    out.token_atoms.push_back(e.token_atoms[i]);
    out.residue_index.push_back(e.residue_index[i]);
    if (author) {
      out.author_index.push_back(e.author_index[i]);
      out.insertion_codes.push_back(e.insertion_codes[i]);
    }
    out.asym_id.push_back(e.asym_id[i]);
    out.entity_id.push_back(e.entity_id[i]);
    out.sym_id.push_back(e.sym_id[i]);
    const size_t a = static_cast<size_t>(i) * kMaxAtomsPerToken;
    out.coords.insert(out.coords.end(), e.coords.begin() + 3 * a, e.coords.begin() + 3 * (a + kMaxAtomsPerToken));
    out.atom_mask.insert(out.atom_mask.end(), e.atom_mask.begin() + a, e.atom_mask.begin() + a + kMaxAtomsPerToken);
  }
  for (const Bond& b : e.bonds)
    if (new_index[b.i] >= 0 && new_index[b.j] >= 0) {
      const bool keep_order = new_index[b.i] < new_index[b.j];
      out.bonds.push_back(keep_order ? Bond{new_index[b.i], new_index[b.j], b.slot_i, b.slot_j}
                                     : Bond{new_index[b.j], new_index[b.i], b.slot_j, b.slot_i});
    }
  std::sort(out.bonds.begin(), out.bonds.end());
  if (!e.msas.empty() || !e.templates.empty()) {
    // Each chain's MSA and templates keep the columns of its kept residues.
    const std::vector<int64_t> column = chain_columns(e);
    std::vector<std::vector<int64_t>> kept(e.n_chains());
    for (const int32_t i : tokens)
      if (kept[e.asym_id[i]].empty() || kept[e.asym_id[i]].back() != column[i]) kept[e.asym_id[i]].push_back(column[i]);
    for (int c = 0; c < static_cast<int>(e.msas.size()); ++c)
      if (e.msas[c].depth > 0) out.msas[c] = msa_columns(e.msas[c], kept[c]);
    for (int c = 0; c < static_cast<int>(e.templates.size()); ++c)
      for (size_t k = 0; k < e.templates[c].size(); ++k) out.templates[c][k] = template_columns(e.templates[c][k], kept[c]);
  }
  return out;
}

std::vector<at::Tensor*> Batch::tensors() {
  return {&restype,      &mol_type,   &residue_index, &token_index,  &asym_id,     &entity_id,      &sym_id,
          &token_mask,   &token_bonds, &bond_atoms,   &bond_mask,    &atom_index,   &atom_token,  &atom_exists,
          &atom_coords,  &atom_mask,    &rep_coords,  &rep_mask,       &rep_slot,
          &centre_slot,  &centre_mask, &frame_atoms, &frame_mask,  &ref.pos,
          &ref.element,  &ref.charge, &ref.mask,      &ref.name_chars, &ref.space_uid, &msa,        &msa_deletion,
          &msa_mask,     &profile,    &deletion_mean, &template_restype, &template_coords, &template_mask};
}

int64_t Batch::real_tokens() const { return token_mask.sum().item<double>(); }

namespace {

template <typename Fn>
Batch map_tensors(const Batch& in, Fn&& fn) {
  Batch b = in;
  for (at::Tensor* t : b.tensors()) *t = fn(*t);
  return b;
}

}  // namespace

Batch Batch::to(const at::Device& device) const {
  return map_tensors(*this, [&](const at::Tensor& t) { return t.to(device, /*non_blocking=*/true); });
}

Batch Batch::pinned() const {
  return map_tensors(*this, [](const at::Tensor& t) { return t.pin_memory(); });
}

Batch make_batch(const std::vector<const Entry*>& entries,
                 const std::vector<std::vector<int32_t>>& selections, int pad_to, const MsaSampling& msa,
                 const TemplateSampling& templates) {
  MF_CHECK(!entries.empty() && entries.size() == selections.size(),
           "make_batch: need one selection per entry");
  const int64_t B = static_cast<int64_t>(entries.size());
  int64_t N = pad_to;
  for (size_t b = 0; b < entries.size(); ++b) {
    const int64_t len = selections[b].empty() ? entries[b]->n_tokens() : selections[b].size();
    if (pad_to <= 0) N = std::max(N, len);
    MF_CHECK(len <= N, "make_batch: entry ", entries[b]->name, " has ", len,
             " tokens, more than pad_to=", N);
  }
  constexpr int A = kMaxAtomsPerToken;
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  Batch out;
  out.restype = at::full({B, N}, kGapToken, i64);
  out.mol_type = at::zeros({B, N}, i64);
  out.residue_index = at::zeros({B, N}, i64);
  out.token_index = at::zeros({B, N}, i64);
  out.token_bonds = at::zeros({B, N, N}, at::TensorOptions().dtype(at::kByte));
  int64_t max_bonds = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t nb = 0;
    if (selections[b].empty()) {
      nb = static_cast<int64_t>(entries[b]->bonds.size());
    } else {
      std::vector<bool> in(entries[b]->n_tokens(), false);
      for (const int32_t t : selections[b]) in[t] = true;
      for (const Bond& bond : entries[b]->bonds) nb += in[bond.i] && in[bond.j];
    }
    max_bonds = std::max(max_bonds, nb);
  }
  out.bond_atoms = at::zeros({B, max_bonds, 2}, i64);
  out.bond_mask = at::zeros({B, max_bonds}, f32);
  // The compact atom list: every slot a token has (its residue's layout, or slot 0).
  std::vector<std::vector<int32_t>> compact(B);  // per entry: batch row * A + slot -> atom, -1 if none
  int64_t max_atoms = 1;
  std::vector<std::vector<int32_t>> sels(B);
  for (int64_t b = 0; b < B; ++b) sels[b] = selections[b].empty() ? all_tokens(*entries[b]) : selections[b];
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& sel = sels[b];
    compact[b].assign(sel.size() * A, -1);
    int32_t k = 0;
    for (size_t i = 0; i < sel.size(); ++i) {
      const Entry& e = *entries[b];
      const int slots = e.per_atom(sel[i]) ? 1 : atom_count(e.restype[sel[i]]);
      for (int s = 0; s < slots; ++s) compact[b][i * A + s] = k++;
    }
    max_atoms = std::max<int64_t>(max_atoms, k);
  }
  // Padding points at slot kMaxAtomsPerToken - 1 of token 0, which no residue type has (RNA G,
  // the largest, has 23 atoms), so it never aliases a real atom.
  out.atom_index = at::full({B, max_atoms}, kMaxAtomsPerToken - 1, i64);
  out.atom_token = at::zeros({B, max_atoms}, i64);
  out.atom_exists = at::zeros({B, max_atoms}, f32);
  {
    auto index = out.atom_index.accessor<int64_t, 2>();
    auto token = out.atom_token.accessor<int64_t, 2>();
    auto exists = out.atom_exists.accessor<float, 2>();
    for (int64_t b = 0; b < B; ++b)
      for (size_t d = 0; d < compact[b].size(); ++d)
        if (const int32_t k = compact[b][d]; k >= 0) {
          index[b][k] = static_cast<int64_t>(d);
          token[b][k] = static_cast<int64_t>(d / A);
          exists[b][k] = 1.f;
        }
  }
  out.asym_id = at::zeros({B, N}, i64);
  out.entity_id = at::zeros({B, N}, i64);
  out.sym_id = at::zeros({B, N}, i64);
  out.token_mask = at::zeros({B, N}, f32);
  out.atom_coords = at::zeros({B, N, A, 3}, f32);
  out.atom_mask = at::zeros({B, N, A}, f32);
  out.rep_coords = at::zeros({B, N, 3}, f32);
  out.rep_mask = at::zeros({B, N}, f32);
  out.rep_slot = at::zeros({B, N}, i64);
  out.centre_slot = at::zeros({B, N}, i64);
  out.centre_mask = at::zeros({B, N}, f32);

  std::vector<EntryMsa> msas(B);
  int64_t S = 1;
  for (int64_t b = 0; b < B; ++b) {
    msas[b] = entry_msa(*entries[b], sels[b], {msa.max_rows, mix_seed(msa.seed, static_cast<uint64_t>(b))});
    S = std::max(S, msas[b].rows);
  }
  out.msa = at::full({B, S, N}, kGapToken, i64);
  out.msa_deletion = at::zeros({B, S, N}, f32);
  out.msa_mask = at::zeros({B, S, N}, f32);
  out.profile = at::zeros({B, N, kNumTokenTypes}, f32);
  out.deletion_mean = at::zeros({B, N}, f32);

  // Templates: per example and chain the selected ones; T counts the chains the selection has.
  std::vector<std::vector<std::vector<int32_t>>> shown(B);
  int64_t T = 0;
  for (int64_t b = 0; b < B; ++b) {
    const Entry& e = *entries[b];
    shown[b] = select_templates(e, {templates.max_templates, templates.random,
                                    mix_seed(templates.seed, static_cast<uint64_t>(b))});
    std::vector<bool> present(e.n_chains(), false);
    for (const int32_t t : sels[b]) present[e.asym_id[t]] = true;
    for (int c = 0; c < e.n_chains(); ++c)
      if (present[c]) T = std::max<int64_t>(T, static_cast<int64_t>(shown[b][c].size()));
  }
  out.template_restype = at::full({B, T, N}, kGapToken, i64);
  out.template_coords = at::zeros({B, T, N, kTemplateAtoms, 3}, f32);
  out.template_mask = at::zeros({B, T, N, kTemplateAtoms}, f32);
  if (T > 0) {
    auto tr = out.template_restype.accessor<int64_t, 3>();
    auto tc = out.template_coords.accessor<float, 5>();
    auto tm = out.template_mask.accessor<float, 4>();
    for (int64_t b = 0; b < B; ++b) {
      const Entry& e = *entries[b];
      const std::vector<int64_t> column = chain_columns(e);
      const std::vector<int32_t>& sel = sels[b];
      for (size_t i = 0; i < sel.size(); ++i) {
        const int32_t t = sel[i], c = e.asym_id[t];
        if (e.per_atom(t)) continue;
        for (size_t k = 0; k < shown[b][c].size(); ++k) {
          const ChainTemplate& tpl = e.templates[c][shown[b][c][k]];
          const int64_t r = column[t];
          MF_CHECK(r < tpl.size(), "make_batch: ", e.name, " chain ", e.chain_ids[c], ": template ", tpl.name, " has ",
                   tpl.size(), " residues, the chain more");
          tr[b][k][i] = tpl.restype[r];
          for (int a = 0; a < kTemplateAtoms; ++a) {
            tm[b][k][i][a] = tpl.mask[r * kTemplateAtoms + a];
            for (int x = 0; x < 3; ++x) tc[b][k][i][a][x] = tpl.coords[(r * kTemplateAtoms + a) * 3 + x];
          }
        }
      }
    }
  }

  auto restype = out.restype.accessor<int64_t, 2>();
  auto moltype = out.mol_type.accessor<int64_t, 2>();
  auto tokidx = out.token_index.accessor<int64_t, 2>();
  auto bonds = out.token_bonds.accessor<uint8_t, 3>();
  auto batoms = out.bond_atoms.accessor<int64_t, 3>();
  auto bmask = out.bond_mask.accessor<float, 2>();
  auto resid = out.residue_index.accessor<int64_t, 2>();
  auto asym = out.asym_id.accessor<int64_t, 2>();
  auto entity = out.entity_id.accessor<int64_t, 2>();
  auto sym = out.sym_id.accessor<int64_t, 2>();
  auto tmask = out.token_mask.accessor<float, 2>();
  auto xyz = out.atom_coords.accessor<float, 4>();
  auto amask = out.atom_mask.accessor<float, 3>();
  auto rep = out.rep_coords.accessor<float, 3>();
  auto rmask = out.rep_mask.accessor<float, 2>();
  auto rslot = out.rep_slot.accessor<int64_t, 2>();
  auto cslot = out.centre_slot.accessor<int64_t, 2>();
  auto cmask = out.centre_mask.accessor<float, 2>();
  auto mt = out.msa.accessor<int64_t, 3>();
  auto md = out.msa_deletion.accessor<float, 3>();
  auto mm = out.msa_mask.accessor<float, 3>();
  for (int64_t b = 0; b < B; ++b) {
    const Entry& e = *entries[b];
    out.names.push_back(e.name);
    const std::vector<int32_t>& sel = sels[b];
    const EntryMsa& m = msas[b];
    const int64_t n = static_cast<int64_t>(sel.size());
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        mt[b][r][i] = m.tokens[r * n + i];
        md[b][r][i] = m.deletions[r * n + i];
        mm[b][r][i] = 1.f;
      }
    out.profile[b].narrow(0, 0, n).copy_(at::from_blob(const_cast<float*>(m.profile.data()), {n, kNumTokenTypes}, f32));
    out.deletion_mean[b].narrow(0, 0, n).copy_(at::from_blob(const_cast<float*>(m.deletion_mean.data()), {n}, f32));
    std::vector<int32_t> position(e.n_tokens(), -1);  // entry token -> batch row
    for (int64_t i = 0; i < n; ++i) position[sel[i]] = static_cast<int32_t>(i);
    int64_t nb = 0;
    for (const Bond& bond : e.bonds) {
      const int32_t x = position[bond.i], y = position[bond.j];
      if (x < 0 || y < 0) continue;
      bonds[b][x][y] = bonds[b][y][x] = 1;
      batoms[b][nb][0] = compact[b][x * A + bond.slot_i];
      batoms[b][nb][1] = compact[b][y * A + bond.slot_j];
      MF_CHECK(batoms[b][nb][0] >= 0 && batoms[b][nb][1] >= 0, "make_batch: ", e.name, ": a bond to an atom slot its token "
               "does not have");
      bmask[b][nb] = e.atom_mask[bond.i * A + bond.slot_i] && e.atom_mask[bond.j * A + bond.slot_j] ? 1.f : 0.f;
      ++nb;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(sel.size()); ++i) {
      const int t = sel[i];
      restype[b][i] = e.restype[t];
      moltype[b][i] = e.mol_type[t];
      tokidx[b][i] = t;
      resid[b][i] = e.residue_index[t];
      asym[b][i] = e.asym_id[t];
      entity[b][i] = e.entity_id[t];
      sym[b][i] = e.sym_id[t];
      tmask[b][i] = 1.f;
      for (int a = 0; a < A; ++a) {
        amask[b][i][a] = e.atom_mask[t * A + a];
        for (int x = 0; x < 3; ++x) xyz[b][i][a][x] = e.coords[(t * A + a) * 3 + x];
      }
      const int r = e.representative_slot(t), c = e.centre_slot(t);
      rslot[b][i] = r;
      cslot[b][i] = c;
      cmask[b][i] = !e.per_atom(t) && e.atom_mask[t * A + c] ? 1.f : 0.f;
      rmask[b][i] = e.atom_mask[t * A + r];
      for (int x = 0; x < 3; ++x) rep[b][i][x] = e.coords[(t * A + r) * 3 + x];
    }
  }
  out.ref = batch_reference_features(entries, sels, out.restype);
  token_frames(entries, sels, out);
  out.padded = std::any_of(sels.begin(), sels.end(), [N](const std::vector<int32_t>& s) {
    return static_cast<int64_t>(s.size()) < N;
  });
  return out;
}

}  // namespace megafold::data
