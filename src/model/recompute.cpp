#include "model/recompute.h"

#include <torch/autograd.h>

#include "core/check.h"
#include "model/autocast.h"

namespace megafold::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  // Inputs after ctx: block (not a tensor), s, z, token_mask, pair_mask, seed (not a tensor).
  // Parameter gradients are not routed through this node: the recomputation in backward
  // runs a nested backward that accumulates them into the parameters' .grad directly.
  static variable_list forward(AutogradContext* ctx, PairformerBlockImpl* block,
                               const at::Tensor& s, const at::Tensor& z,
                               const at::Tensor& token_mask, const at::Tensor& pair_mask,
                               int64_t seed) {
    const at::DeviceType dev = z.device().type();
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(dev);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(dev);
    ctx->save_for_backward({s, z, token_mask, pair_mask});
    // Outputs that do not reach the loss (the last block's single track) then arrive as
    // undefined gradients, and their recomputed graph is not differentiated.
    ctx->set_materialize_grads(false);
    const PairformerState out =
        block->forward({s, z}, token_mask, pair_mask, static_cast<uint64_t>(seed));
    return {out.s, out.z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* block = reinterpret_cast<PairformerBlockImpl*>(ctx->saved_data["block"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor s = saved[0].detach().requires_grad_(true);
    const at::Tensor z = saved[1].detach().requires_grad_(true);
    PairformerState out;
    {
      at::AutoGradMode grad_on(true);
      AutocastScope autocast(z.device().type(), ctx->saved_data["autocast"].toBool(),
                             ctx->saved_data["autocast_dtype"].toScalarType());
      out = block->forward({s, z}, saved[2], saved[3],
                           static_cast<uint64_t>(ctx->saved_data["seed"].toInt()));
    }
    // An undefined output gradient means that output does not reach the loss.
    variable_list outputs, grads;
    for (int i = 0; i < 2; ++i) {
      if (!grad_out[i].defined()) continue;
      outputs.push_back(i == 0 ? out.s : out.z);
      grads.push_back(grad_out[i]);
    }
    torch::autograd::backward(outputs, grads);
    return {at::Tensor(), s.grad(), z.grad(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The function of a generic checkpoint, owned by the autograd node until backward has run.
struct HeldFn : public torch::CustomClassHolder {
  explicit HeldFn(TensorFn f) : fn(std::move(f)) {}
  TensorFn fn;
};

// Generic form: inputs after ctx are the function (not a tensor) and the input list.
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
                                   uint64_t dropout_seed) {
  const variable_list out =
      CheckpointedBlock::apply(&block, in.s, in.z, token_mask, pair_mask,
                               static_cast<int64_t>(dropout_seed));
  return {out[0], out[1]};
}

}  // namespace megafold::model
