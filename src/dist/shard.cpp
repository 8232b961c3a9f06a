#include "dist/shard.h"

#include <ATen/ops/cat.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty_like.h>
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

// The ring of ring_contract: rank r passes to r - 1 and receives from r + 1; after s passes it
// holds the block that rank r + s owns.
struct Ring {
  PairShard s;
  int left() const { return static_cast<int>((s.rank + s.ranks - 1) % s.ranks); }
  int right() const { return static_cast<int>((s.rank + 1) % s.ranks); }
  int64_t owner(int64_t step) const { return (s.rank + step) % s.ranks; }
  // Starts passing x on; returns the tensor it will arrive in and the wait.
  std::pair<at::Tensor, std::function<void()>> pass(const at::Tensor& x_in) const {
    const at::Tensor x = x_in.is_non_overlapping_and_dense() ? x_in : x_in.contiguous();
    at::Tensor next = at::empty_like(x);  // x's memory order (channel-major operands stay so)
    return {next, s.group->shift_async(x, next, left(), right())};
  }
};

struct RingContractFunction : public torch::autograd::Function<RingContractFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b_rows, int64_t group,
                               int64_t rank, int64_t ranks, int64_t rows, int64_t contract) {
    const Ring ring{{reinterpret_cast<ProcessGroup*>(group), rank, ranks, rows}};
    const auto fn = reinterpret_cast<Contract>(contract);
    std::vector<at::Tensor> blocks(ranks);
    at::Tensor cur = b_rows;
    for (int64_t step = 0; step < ranks; ++step) {
      std::pair<at::Tensor, std::function<void()>> next;
      if (step + 1 < ranks) next = ring.pass(cur);  // in flight during this block's contraction
      blocks[ring.owner(step)] = fn(a, cur);
      if (step + 1 < ranks) {
        next.second();
        cur = next.first;
      }
    }
    ctx->save_for_backward({a, b_rows});
    ctx->saved_data["ring"] = std::vector<int64_t>{group, rank, ranks, rows, contract};
    return {at::cat(blocks, 2)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<int64_t> v = ctx->saved_data["ring"].toIntVector();
    const Ring ring{{reinterpret_cast<ProcessGroup*>(v[0]), v[1], v[2], v[3]}};
    const auto fn = reinterpret_cast<Contract>(v[4]);
    const at::Tensor& a = saved[0];
    const int64_t ranks = ring.s.ranks, n = ring.s.rows;
    at::Tensor da, cur = saved[1];
    std::pair<at::Tensor, std::function<void()>> db;  // the travelling gradient of the block held
    for (int64_t step = 0; step < ranks; ++step) {
      std::pair<at::Tensor, std::function<void()>> next;
      if (step + 1 < ranks) next = ring.pass(cur);
      // This rank's share of the block's gradients. t_ij = sum_k a_ik b_jk, so
      // da_ik = sum_j dt_ij b_jk and db_jk = sum_i dt_ij a_ik: the same contraction on
      // transposed views, with no forward product recomputed.
      const at::Tensor dt = g[0].narrow(2, ring.owner(step) * n, n);
      const at::Tensor da_block = fn(dt, cur.transpose(1, 2));
      da = step == 0 ? da_block : da + da_block;
      at::Tensor db_block = fn(dt.transpose(1, 2), a.transpose(1, 2));
      if (step > 0) {
        db.second();  // the shares of the ranks after this one, for the same block
        db_block = db.first + db_block;
      }
      db = ring.pass(db_block);  // on to the previous rank; the last pass reaches the owner
      if (step + 1 < ranks) {
        next.second();
        cur = next.first;
      }
    }
    db.second();
    return {da, db.first, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_contract(const at::Tensor& a, const at::Tensor& b_rows, const PairShard& s, Contract contract) {
  if (!s.sharded()) return contract(a, b_rows);
  return RingContractFunction::apply(a, b_rows, reinterpret_cast<int64_t>(s.group), s.rank, s.ranks, s.rows,
                                     reinterpret_cast<int64_t>(contract))[0];
}

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
  if (!full.defined()) return full;
  return s.sharded() ? full.narrow(1, s.offset(), s.rows) : full;
}

at::Tensor local_rows_transposed(const at::Tensor& full, const PairShard& s) {
  if (!full.defined()) return full;
  const at::Tensor t = full.transpose(1, 2);
  return s.sharded() ? t.narrow(1, s.offset(), s.rows) : t;
}

}  // namespace megafold::dist
