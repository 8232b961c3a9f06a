#include "dist/shard.h"

#include <ATen/ops/cat.h>
#include <torch/autograd.h>

#include "core/check.h"
#include "dist/process_group.h"

namespace megafold::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor gather_rows_raw(const at::Tensor& x, const PairShard& s) {
  return at::cat(s.group->all_gather(x), 1);
}

// Each rank's slice of the full-rows gradient goes to that rank; the P slices a rank receives
// are added in rank order.
at::Tensor scatter_sum_rows(const at::Tensor& g, const PairShard& s) {
  std::vector<int64_t> shape = g.sizes().vec();
  shape[1] = s.rows;
  shape.insert(shape.begin() + 1, s.ranks);  // [B, P, n, ...]
  const at::Tensor chunks = g.reshape(shape).transpose(0, 1);  // [P, B, n, ...]
  const at::Tensor got = s.group->all_to_all(chunks);
  at::Tensor sum = got.select(0, 0).clone();
  for (int64_t p = 1; p < s.ranks; ++p) sum.add_(got.select(0, p));
  return sum;
}

// Rows of z [B, n, N, ...] -> rows of z^T: block (mine, p) of z goes to rank p, which lays the
// P blocks it receives side by side as the columns of its rows of z^T.
at::Tensor transpose_raw(const at::Tensor& x, const PairShard& s) {
  std::vector<int64_t> shape = x.sizes().vec();  // [B, n, N, rest...]
  std::vector<int64_t> split = shape;
  split[2] = s.rows;
  split.insert(split.begin() + 2, s.ranks);  // [B, n, P, n, rest...]
  const at::Tensor blocks = x.reshape(split).movedim(2, 0);  // [P, B, n, n, rest...]
  const at::Tensor got = s.group->all_to_all(blocks);        // [P, B, n_rows_of_p, n_mine, rest...]
  // z^T[i, p * n + k] = z[p * n + k, i]: rows i are the received blocks' columns.
  return got.transpose(2, 3).movedim(0, 2).reshape(shape);
}

// A collective as an autograd function: kForward on the way in, kBackward on the gradient.
// The shard travels through autograd as plain integers and the group's address.
using Collective = at::Tensor (*)(const at::Tensor&, const PairShard&);
template <Collective kForward, Collective kBackward>
struct ShardCollective : public torch::autograd::Function<ShardCollective<kForward, kBackward>> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t rank,
                               int64_t ranks, int64_t rows) {
    ctx->saved_data["shard"] = std::vector<int64_t>{group, rank, ranks, rows};
    return {kForward(x, {reinterpret_cast<ProcessGroup*>(group), rank, ranks, rows})};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const std::vector<int64_t> v = ctx->saved_data["shard"].toIntVector();
    return {kBackward(g[0], {reinterpret_cast<ProcessGroup*>(v[0]), v[1], v[2], v[3]}), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
  static at::Tensor apply_to(const at::Tensor& x, const PairShard& s) {
    return ShardCollective::apply(x, reinterpret_cast<int64_t>(s.group), s.rank, s.ranks, s.rows)[0];
  }
};

at::Tensor own_rows(const at::Tensor& full, const PairShard& s) { return local_rows(full, s).contiguous(); }

// Backward of the gather: each rank's share of the gradient goes back to it, summed.
using GatherRows = ShardCollective<gather_rows_raw, scatter_sum_rows>;
// Between replicated and row-sharded code: entering keeps this rank's rows and gathers the
// rows' gradients back (every rank's replicated producer sees the whole gradient); leaving
// gathers the rows and keeps this rank's rows of the (identical) replicated gradient.
using SplitRows = ShardCollective<own_rows, gather_rows_raw>;
using JoinRows = ShardCollective<gather_rows_raw, own_rows>;
// The shard transpose is its own inverse.
using TransposeShards = ShardCollective<transpose_raw, transpose_raw>;

}  // namespace

PairShard make_pair_shard(ProcessGroup& group, int64_t n_tokens) {
  MF_CHECK(n_tokens % group.world() == 0, "pair sharding: ", n_tokens, " tokens do not split into ", group.world(),
           " equal row blocks (pad the crop to a multiple of the group size)");
  return {&group, group.rank(), group.world(), n_tokens / group.world()};
}

at::Tensor gather_rows(const at::Tensor& x, const PairShard& s) {
  if (!s.sharded()) return x;
  return GatherRows::apply_to(x, s);
}

at::Tensor split_rows(const at::Tensor& full, const PairShard& s) {
  if (!s.sharded()) return full;
  return SplitRows::apply_to(full, s);
}

at::Tensor join_rows(const at::Tensor& x, const PairShard& s) {
  if (!s.sharded()) return x;
  return JoinRows::apply_to(x, s);
}

at::Tensor transpose_shards(const at::Tensor& x, const PairShard& s) {
  if (!s.sharded()) return x.transpose(1, 2);
  return TransposeShards::apply_to(x, s);
}

at::Tensor local_rows(const at::Tensor& full, const PairShard& s) {
  return s.sharded() ? full.narrow(1, s.offset(), s.rows) : full;
}

at::Tensor local_rows_transposed(const at::Tensor& full, const PairShard& s) {
  const at::Tensor t = full.transpose(1, 2);
  return s.sharded() ? t.narrow(1, s.offset(), s.rows) : t;
}

}  // namespace megafold::dist
