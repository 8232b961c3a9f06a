#include "model/recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

namespace megafold::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Restores one device type's autocast state for a scope.
class AutocastScope {
 public:
  AutocastScope(at::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        prev_enabled_(at::autocast::is_autocast_enabled(device)),
        prev_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, enabled);
    at::autocast::set_autocast_dtype(device_, dtype);
  }
  ~AutocastScope() {
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
  }

 private:
  at::DeviceType device_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  // Inputs after ctx: block (not a tensor), s, z, token_mask, pair_mask, seed (not a tensor),
  // then every parameter of the block so that autograd routes their gradients here.
  static variable_list forward(AutogradContext* ctx, PairformerBlockImpl* block,
                               const at::Tensor& s, const at::Tensor& z,
                               const at::Tensor& token_mask, const at::Tensor& pair_mask,
                               int64_t seed, const variable_list& params) {
    const at::DeviceType dev = z.device().type();
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(dev);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(dev);
    ctx->save_for_backward({s, z, token_mask, pair_mask});
    const PairformerState out =
        block->forward({s, z}, token_mask, pair_mask, static_cast<uint64_t>(seed));
    return {out.s, out.z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* block = reinterpret_cast<PairformerBlockImpl*>(ctx->saved_data["block"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor s = saved[0].detach().requires_grad_(true);
    const at::Tensor z = saved[1].detach().requires_grad_(true);
    variable_list params = block->parameters();
    PairformerState out;
    {
      at::AutoGradMode grad_on(true);
      AutocastScope autocast(z.device().type(), ctx->saved_data["autocast"].toBool(),
                             ctx->saved_data["autocast_dtype"].toScalarType());
      out = block->forward({s, z}, saved[2], saved[3],
                           static_cast<uint64_t>(ctx->saved_data["seed"].toInt()));
    }
    variable_list inputs = {s, z};
    inputs.insert(inputs.end(), params.begin(), params.end());
    for (at::Tensor& g : grad_out)
      if (!g.defined()) g = at::Tensor();
    const variable_list grads =
        torch::autograd::grad({out.s, out.z}, inputs, {grad_out[0], grad_out[1]},
                              /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    variable_list result = {at::Tensor(), grads[0], grads[1], at::Tensor(), at::Tensor(),
                            at::Tensor()};
    result.insert(result.end(), grads.begin() + 2, grads.end());
    return result;
  }
};

}  // namespace

PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed) {
  const variable_list out =
      CheckpointedBlock::apply(&block, in.s, in.z, token_mask, pair_mask,
                               static_cast<int64_t>(dropout_seed), block.parameters());
  return {out[0], out[1]};
}

}  // namespace megafold::model
