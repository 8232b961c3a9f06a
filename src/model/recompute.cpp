#include "model/recompute.h"

#include <torch/autograd.h>

#include "core/check.h"
#include "core/autocast.h"

namespace megafold::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The function of a generic checkpoint, owned by the autograd node until backward has run.
struct HeldFn : public torch::CustomClassHolder {
  explicit HeldFn(TensorFn f) : fn(std::move(f)) {}
  TensorFn fn;
};

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
    const TensorFn* fn = &held->fn;
    ctx->saved_data["fn"] = c10::IValue::make_capsule(std::move(held));
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(dev);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(dev);
    ctx->save_for_backward(inputs);
    ctx->set_materialize_grads(false);
    at::AutoGradMode grad_off(false);
    return (*fn)(inputs);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto held = c10::static_intrusive_pointer_cast<HeldFn>(ctx->saved_data["fn"].toCapsule());
    const TensorFn* fn = &held->fn;
    variable_list inputs;
    for (const at::Tensor& t : ctx->get_saved_variables())
      inputs.push_back(t.detach().requires_grad_(t.is_floating_point()));
    variable_list out;
    {
      at::AutoGradMode grad_on(true);
      AutocastScope autocast(inputs.front().device().type(), ctx->saved_data["autocast"].toBool(),
                             ctx->saved_data["autocast_dtype"].toScalarType());
      out = (*fn)(inputs);
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

}  // namespace

std::vector<at::Tensor> checkpointed(const TensorFn& fn, const std::vector<at::Tensor>& inputs) {
  MF_CHECK(!inputs.empty(), "checkpointed: needs at least one input tensor");
  return Checkpointed::apply(c10::make_intrusive<HeldFn>(fn), at::TensorList(inputs));
}

PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed, const dist::PairShard* pair_rows) {
  // The masks and the shard are constants of the recomputation; only s and z carry gradients.
  // The recomputation repeats the forward's collectives in the same order on every rank.
  auto run = [&block, token_mask, pair_mask, dropout_seed, pair_rows](const std::vector<at::Tensor>& x) {
    const PairformerState out = block.forward({x[0], x[1]}, token_mask, pair_mask, dropout_seed, pair_rows);
    return std::vector<at::Tensor>{out.s, out.z};
  };
  const std::vector<at::Tensor> out = checkpointed(run, {in.s, in.z});
  return {out[0], out[1]};
}

}  // namespace megafold::model
