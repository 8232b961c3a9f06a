#pragma once
// Row sharding of the pair representation: rank r of a group of P holds rows
// [r * n, (r + 1) * n) of z [B, N, N, c], n = N / P. Two differentiable collectives move
// what the row-local ops cannot reach:
//   gather_rows       the rows of every rank (the projected operands of the N^3 contractions
//                     and the attention bias); backward sums each rank's share of the gradient
//                     back to its owner (a reduce-scatter through all_to_all, added in rank
//                     order: deterministic).
//   transpose_shards  the row shard of z -> the row shard of z^T (an all-to-all of n x n
//                     blocks), for the column-wise ops (incoming TriMul, ending-node
//                     attention); it is its own inverse, so its backward is itself.
// Where row-sharded code meets replicated code (the same values on every rank):
//   split_rows        replicated [B, N, ...] -> this rank's rows; backward gathers the rows'
//                     gradients, so every rank's replicated producer gets the whole gradient.
//   join_rows         this rank's rows -> replicated [B, N, ...]; backward keeps this rank's
//                     rows of the replicated (identical on every rank) gradient.
// Parameters applied to rows (the pair stack's, the pair-bias projection's) then hold this
// rank's share of their gradient, to be summed over the group; every other parameter's
// gradient is the same on every rank.
// A default-constructed PairShard is the unsharded case (P = 1): all are identities.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace megafold::dist {

class ProcessGroup;

struct PairShard {
  ProcessGroup* group = nullptr;  // null: unsharded
  int64_t rank = 0, ranks = 1;
  int64_t rows = 0;               // n, the rows held here (N / ranks)
  int64_t offset() const { return rank * rows; }
  bool sharded() const { return group != nullptr && ranks > 1; }
};

// A shard of N rows over the group's ranks; N must be a multiple of the group size.
PairShard make_pair_shard(ProcessGroup& group, int64_t n_tokens);

// x [B, n, ...] (this rank's rows) -> [B, P * n, ...] (every rank's rows in rank order).
at::Tensor gather_rows(const at::Tensor& x, const PairShard& shard);

at::Tensor split_rows(const at::Tensor& full, const PairShard& shard);
at::Tensor join_rows(const at::Tensor& x, const PairShard& shard);

// x [B, n, N, ...] rows of z -> [B, n, N, ...] rows of z^T (z^T[i, k] = z[k, i]).
at::Tensor transpose_shards(const at::Tensor& x, const PairShard& shard);

// The N^3 contraction of the outgoing triangle update on row shards without gathering b:
// t[:, i, j] = contract(a, b)[:, i, j] over this rank's rows i of a [B, n, K, c] and every
// rank's rows j of b (this rank holds b_rows [B, n, K, c]). b's row blocks travel round the
// ring (each rank sends to the one before it): while one block is contracted, the next is on
// its way. Backward runs the ring again; each block's gradient travels with it, every rank
// adding its share, and arrives complete at the block's owner. So a rank holds two blocks of b
// at a time, never all of b, and keeps a and its own b_rows for backward. contract is the
// local contraction (that form: backward applies it to transposed operands).
using Contract = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
at::Tensor ring_contract(const at::Tensor& a, const at::Tensor& b_rows, const PairShard& shard, Contract contract);

// This rank's rows of a full [B, N, ...] tensor (a view), and of its transpose in dims 1, 2; an
// undefined tensor (no mask) stays undefined.
at::Tensor local_rows(const at::Tensor& full, const PairShard& shard);
at::Tensor local_rows_transposed(const at::Tensor& full, const PairShard& shard);

}  // namespace megafold::dist
