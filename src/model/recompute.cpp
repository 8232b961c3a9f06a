#include "model/recompute.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/autograd.h>

#include <algorithm>
#include <numeric>

#include "core/autocast.h"
#include "core/check.h"

namespace megafold::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The function of a generic checkpoint and where its inputs wait, owned by the autograd node
// until backward has run.
struct HeldFn : public torch::CustomClassHolder {
  HeldFn(TensorFn f, SavedInputs s) : fn(std::move(f)), saved(std::move(s)) {}
  TensorFn fn;
  SavedInputs saved;
};

void save_autocast(AutogradContext* ctx, at::DeviceType dev) {
  ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(dev);
  ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(dev);
}

AutocastScope restore_autocast(AutogradContext* ctx, at::DeviceType dev) {
  return AutocastScope(dev, ctx->saved_data["autocast"].toBool(), ctx->saved_data["autocast_dtype"].toScalarType());
}

// Inputs after ctx: the function (not a tensor) and the input list. Parameter gradients are
// not routed through this node: the recomputation in backward runs a nested backward that
// accumulates them into the parameters' .grad directly. Outputs that do not reach the loss
// (the last block's single track) arrive as undefined gradients, and their recomputed graph
// is not differentiated.
struct Checkpointed : public torch::autograd::Function<Checkpointed> {
  // The inputs come as a TensorList: autograd treats a std::vector argument as a non-tensor.
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<HeldFn> held, at::TensorList list) {
    const variable_list inputs = list.vec();
    const at::DeviceType dev = inputs.front().device().type();
    const HeldFn* h = held.get();
    // Offloaded inputs are not saved here: their handles restore them in backward.
    variable_list to_save = inputs;
    for (size_t k = 0; k < h->saved.offloaded.size() && k < to_save.size(); ++k)
      if (h->saved.offloaded[k]) to_save[k] = at::Tensor();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(std::move(held));
    save_autocast(ctx, dev);
    ctx->save_for_backward(to_save);
    ctx->set_materialize_grads(false);
    at::AutoGradMode grad_off(false);
    return h->fn(inputs);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto held = c10::static_intrusive_pointer_cast<HeldFn>(ctx->saved_data["fn"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    variable_list inputs;
    for (size_t k = 0; k < saved.size(); ++k) {
      const bool offloaded = k < held->saved.offloaded.size() && held->saved.offloaded[k];
      const at::Tensor t = offloaded ? held->saved.offloaded[k]->get() : saved[k];
      inputs.push_back(t.detach().requires_grad_(t.is_floating_point()));
    }
    // The next backward's input starts its way back while this one computes.
    if (held->saved.prefetch) held->saved.prefetch->prefetch();
    variable_list out;
    {
      at::AutoGradMode grad_on(true);
      const AutocastScope autocast = restore_autocast(ctx, inputs.front().device().type());
      out = held->fn(inputs);
    }
    variable_list outputs, grads;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!grad_out[i].defined() || !out[i].requires_grad()) continue;
      outputs.push_back(out[i]);
      grads.push_back(grad_out[i]);
    }
    if (!outputs.empty()) torch::autograd::backward(outputs, grads);
    variable_list result{at::Tensor()};
    for (const at::Tensor& t : inputs) result.push_back(t.grad());
    return result;
  }
};

struct HeldChunkFn : public torch::CustomClassHolder {
  HeldChunkFn(ChunkFn f, size_t n, int64_t d, int64_t c) : fn(std::move(f)), chunked(n), dim(d), chunk(c) {}
  ChunkFn fn;
  size_t chunked;  // the first `chunked` inputs are sliced, the rest passed whole
  int64_t dim, chunk;
};

// An empty tensor like t but with extent n along dim, its dimensions in t's memory order (so
// a chunk's channel-major output gets a channel-major whole).
at::Tensor empty_extended(const at::Tensor& t, int64_t dim, int64_t n) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[dim] = n;
  std::vector<int64_t> order(t.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  std::vector<int64_t> permuted, inverse(t.dim());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted.push_back(sizes[order[i]]);
    inverse[order[i]] = static_cast<int64_t>(i);
  }
  return at::empty(permuted, t.options()).permute(inverse);
}

struct ChunkedCheckpoint : public torch::autograd::Function<ChunkedCheckpoint> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<HeldChunkFn> held, at::TensorList list) {
    const HeldChunkFn* h = held.get();
    const variable_list xs(list.begin(), list.begin() + h->chunked), shared(list.begin() + h->chunked, list.end());
    ctx->saved_data["fn"] = c10::IValue::make_capsule(std::move(held));
    save_autocast(ctx, xs.front().device().type());
    ctx->save_for_backward(list.vec());
    ctx->set_materialize_grads(false);
    at::AutoGradMode grad_off(false);
    const int64_t n = xs.front().size(h->dim);
    variable_list full;
    for (int64_t start = 0; start < n; start += h->chunk) {
      const int64_t c = std::min(h->chunk, n - start);
      variable_list chunks;
      for (const at::Tensor& x : xs) chunks.push_back(x.narrow(h->dim, start, c));
      const variable_list outs = h->fn(chunks, shared, start);
      if (full.empty())
        for (const at::Tensor& o : outs) full.push_back(empty_extended(o, h->dim, n));
      MF_CHECK(outs.size() == full.size(), "chunked_checkpoint: chunks returned different numbers of outputs");
      for (size_t k = 0; k < outs.size(); ++k) full[k].narrow(h->dim, start, c).copy_(outs[k]);
    }
    return full;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto held = c10::static_intrusive_pointer_cast<HeldChunkFn>(ctx->saved_data["fn"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const size_t nx = held->chunked;
    const int64_t n = saved.front().size(held->dim);
    auto wants_grad = [](const at::Tensor& t) { return t.requires_grad() && t.is_floating_point(); };
    variable_list dxs(nx), dshared(saved.size() - nx);
    for (size_t k = 0; k < nx; ++k)
      if (wants_grad(saved[k])) dxs[k] = at::empty_like(saved[k]);
    for (int64_t start = 0; start < n; start += held->chunk) {
      const int64_t c = std::min(held->chunk, n - start);
      variable_list chunks, leaves;
      for (size_t k = 0; k < nx; ++k)
        chunks.push_back(saved[k].detach().narrow(held->dim, start, c).requires_grad_(wants_grad(saved[k])));
      for (size_t k = nx; k < saved.size(); ++k) leaves.push_back(saved[k].detach().requires_grad_(wants_grad(saved[k])));
      variable_list out;
      {
        at::AutoGradMode grad_on(true);
        const AutocastScope autocast = restore_autocast(ctx, saved.front().device().type());
        out = held->fn(chunks, leaves, start);
      }
      variable_list outputs, grads;
      for (size_t k = 0; k < out.size(); ++k) {
        if (!grad_out[k].defined() || !out[k].requires_grad()) continue;
        outputs.push_back(out[k]);
        grads.push_back(grad_out[k].narrow(held->dim, start, c));
      }
      if (!outputs.empty()) torch::autograd::backward(outputs, grads);
      for (size_t k = 0; k < nx; ++k) {
        if (!dxs[k].defined()) continue;
        at::Tensor slot = dxs[k].narrow(held->dim, start, c);
        if (chunks[k].grad().defined()) slot.copy_(chunks[k].grad());
        else slot.zero_();
      }
      for (size_t k = 0; k < leaves.size(); ++k) {
        const at::Tensor g = leaves[k].grad();
        if (g.defined()) dshared[k] = dshared[k].defined() ? dshared[k] + g : g;
      }
    }
    variable_list result{at::Tensor()};
    result.insert(result.end(), dxs.begin(), dxs.end());
    result.insert(result.end(), dshared.begin(), dshared.end());
    return result;
  }
};

bool any_requires_grad(const std::vector<at::Tensor>& ts) {
  for (const at::Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

}  // namespace

std::vector<at::Tensor> checkpointed(const TensorFn& fn, const std::vector<at::Tensor>& inputs,
                                     const SavedInputs& saved) {
  MF_CHECK(!inputs.empty(), "checkpointed: needs at least one input tensor");
  MF_CHECK(saved.offloaded.size() <= inputs.size(), "checkpointed: more offloaded handles than inputs");
  // Autograd records a node only when an input requires grad; without one, fn's parameters
  // would get no gradients, so fn runs as it is.
  if (!any_requires_grad(inputs)) return fn(inputs);
  return Checkpointed::apply(c10::make_intrusive<HeldFn>(fn, saved), at::TensorList(inputs));
}

std::vector<at::Tensor> chunked_checkpoint(const ChunkFn& fn, const std::vector<at::Tensor>& xs,
                                           const std::vector<at::Tensor>& shared, int64_t dim, int64_t chunk) {
  MF_CHECK(!xs.empty(), "chunked_checkpoint: needs at least one tensor to chunk");
  MF_CHECK(dim >= 0 && dim < xs.front().dim(), "chunked_checkpoint: dim ", dim, " out of range for ",
           xs.front().dim(), " dims");
  MF_CHECK(chunk >= 1, "chunked_checkpoint: chunk must be >= 1, got ", chunk);
  const int64_t n = xs.front().size(dim);
  MF_CHECK(n > 0, "chunked_checkpoint: nothing to chunk along dim ", dim);
  for (const at::Tensor& x : xs)
    MF_CHECK(x.dim() > dim && x.size(dim) == n, "chunked_checkpoint: chunked inputs differ in extent along dim ", dim);
  std::vector<at::Tensor> list = xs;
  list.insert(list.end(), shared.begin(), shared.end());
  if (!any_requires_grad(list)) return fn(xs, shared, 0);  // as in checkpointed()
  return ChunkedCheckpoint::apply(c10::make_intrusive<HeldChunkFn>(fn, xs.size(), dim, chunk), at::TensorList(list));
}

at::Tensor chunk_of(const at::Tensor& t, int64_t dim, int64_t start, int64_t length) {
  if (!t.defined() || t.size(dim) == 1) return t;
  return t.narrow(dim, start, length);
}

PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed, const dist::PairShard* pair_rows, const SavedInputs& saved) {
  // The masks and the shard are constants of the recomputation; only s and z carry gradients.
  // The recomputation repeats the forward's collectives in the same order on every rank.
  auto run = [&block, token_mask, pair_mask, dropout_seed, pair_rows](const std::vector<at::Tensor>& x) {
    const PairformerState out = block.forward({x[0], x[1]}, token_mask, pair_mask, dropout_seed, pair_rows);
    return std::vector<at::Tensor>{out.s, out.z};
  };
  const std::vector<at::Tensor> out = checkpointed(run, {in.s, in.z}, saved);
  return {out[0], out[1]};
}

}  // namespace megafold::model
