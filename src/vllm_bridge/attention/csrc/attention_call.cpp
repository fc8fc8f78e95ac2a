// One decoder attention call without Python: the KV-cache write and the
// attention of one layer, straight from the compiled graph into vLLM's CPU
// kernels (_C::cpu_attn_reshape_and_cache, _C::cpu_attention_with_kv_cache).
//
// vLLM's graph calls its attention through a Python custom op
// (vllm::unified_attention_with_output) that looks up the forward context,
// the layer and its metadata, then calls the two kernels from Python. On a
// decode step every weight streams through the caches between two such
// calls, so each trip through the interpreter and the dispatcher runs cold:
// 80-100 us per layer around kernels of a few us.
//
// Here the Python side binds, once per KV cache, what a layer needs
// (bind_layer) and, once per model forward, the step's metadata
// (bind_step, cleared by unbind_step after the forward). attend, which the
// vLLM graph pass `attention-direct` puts in place of vLLM's op with the
// same arguments, runs the kernels for a bound layer and hands every other
// call (no step bound: a dummy run or warm-up; a layer that was not bound)
// to vLLM's op unchanged.
//
// The state is per process and used by the thread that runs the model:
// vLLM's workers run one forward at a time.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

struct Step {
  at::Tensor slot_mapping;
  at::Tensor query_start_loc;
  at::Tensor seq_lens;
  at::Tensor block_table;
  at::Tensor scheduler_metadata;
  bool causal;
  std::optional<at::Tensor> dynamic_causal;
  int64_t num_actual_tokens;
};

struct Layer {
  at::Tensor key_cache;
  at::Tensor value_cache;
  double scale;
  std::optional<at::Tensor> alibi_slopes;
  int64_t sliding_window;
  double softcap;
  std::optional<at::Tensor> sinks;
  double k_scale;
  double v_scale;
  std::string kv_cache_dtype;
  std::string isa;
  bool writes_kv;
  std::shared_ptr<const Step> step;  // null: no step bound
};

std::unordered_map<std::string, Layer>& layers() {
  static std::unordered_map<std::string, Layer> bound;
  return bound;
}

c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

void bind_layer(
    const std::string& name,
    const at::Tensor& kv_cache,
    double scale,
    const std::optional<at::Tensor>& alibi_slopes,
    int64_t sliding_window,
    double softcap,
    const std::optional<at::Tensor>& sinks,
    double k_scale,
    double v_scale,
    const std::string& kv_cache_dtype,
    const std::string& isa,
    bool writes_kv) {
  // kv_cache is [blocks, kv heads, block size, 2 x head size]: the key and
  // value halves as vLLM's backend views them.
  TORCH_CHECK(kv_cache.dim() == 4, "kv_cache must be 4-D, got ", kv_cache.sizes());
  const auto blocks = kv_cache.size(0);
  const auto heads = kv_cache.size(1);
  const auto block_size = kv_cache.size(2);
  auto halves = kv_cache.view({blocks, heads, block_size * 2, -1}).chunk(2, 2);
  layers()[name] = Layer{
      halves[0],   halves[1], scale,   alibi_slopes, sliding_window,
      softcap,     sinks,     k_scale, v_scale,      kv_cache_dtype,
      isa,         writes_kv, nullptr};
}

void unbind_layers() { layers().clear(); }

void bind_step(
    c10::List<std::string> layer_names,
    const at::Tensor& slot_mapping,
    const at::Tensor& query_start_loc,
    const at::Tensor& seq_lens,
    const at::Tensor& block_table,
    const at::Tensor& scheduler_metadata,
    bool causal,
    const std::optional<at::Tensor>& dynamic_causal,
    int64_t num_actual_tokens) {
  auto step = std::make_shared<const Step>(Step{
      slot_mapping, query_start_loc, seq_lens, block_table, scheduler_metadata,
      causal, dynamic_causal, num_actual_tokens});
  auto& bound = layers();
  for (const std::string& name : layer_names) {
    auto layer = bound.find(name);
    TORCH_CHECK(layer != bound.end(), "attention layer ", name, " is not bound");
    layer->second.step = step;
  }
}

void unbind_step() {
  for (auto& entry : layers()) entry.second.step.reset();
}

// For the worker report: layers bound, and how many of them hold a step.
std::vector<int64_t> bound() {
  int64_t with_step = 0;
  for (const auto& entry : layers()) with_step += entry.second.step != nullptr;
  return {static_cast<int64_t>(layers().size()), with_step};
}

at::Tensor first(const at::Tensor& tensor, int64_t rows) {
  return tensor.size(0) == rows ? tensor : tensor.narrow(0, 0, rows);
}

// vLLM's schema: (Tensor query, Tensor key, Tensor value, Tensor(a!) output,
// str layer_name, Tensor? output_scale, Tensor(b!)? output_block_scale,
// Tensor? kv_cache_dummy_dep) -> ()
constexpr size_t kArguments = 8;

void attend(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const auto vllm_attention = op("vllm::unified_attention_with_output");
  static const auto write_kv = op("_C::cpu_attn_reshape_and_cache");
  static const auto attention = op("_C::cpu_attention_with_kv_cache");

  auto arguments = torch::jit::last(*stack, kArguments);
  const auto& bound = layers();
  auto found = bound.find(arguments[4].toStringRef());
  const bool fused_output_quantization =
      !arguments[5].isNone() || !arguments[6].isNone();
  if (found == bound.end() || !found->second.step || fused_output_quantization) {
    vllm_attention.callBoxed(stack);
    return;
  }
  const Layer& layer = found->second;
  const Step& step = *layer.step;
  const int64_t tokens = step.num_actual_tokens;
  const at::Tensor query = arguments[0].toTensor();
  const at::Tensor output = arguments[3].toTensor();
  torch::jit::Stack call;
  call.reserve(18);
  if (layer.writes_kv && !arguments[1].isNone() && !arguments[2].isNone()) {
    // [:tokens]: padding tokens have no slot
    call.emplace_back(first(arguments[1].toTensor(), tokens));
    call.emplace_back(first(arguments[2].toTensor(), tokens));
    call.emplace_back(layer.key_cache);
    call.emplace_back(layer.value_cache);
    call.emplace_back(first(step.slot_mapping, tokens));
    call.emplace_back(layer.isa);
    call.emplace_back(layer.k_scale);
    call.emplace_back(layer.v_scale);
    call.emplace_back(layer.kv_cache_dtype);
    write_kv.callBoxed(&call);
    call.clear();
  }
  call.emplace_back(first(query, tokens));
  call.emplace_back(layer.key_cache);
  call.emplace_back(layer.value_cache);
  call.emplace_back(first(output, tokens));
  call.emplace_back(step.query_start_loc);
  call.emplace_back(step.seq_lens);
  call.emplace_back(layer.scale);
  call.emplace_back(step.causal);
  call.emplace_back(layer.alibi_slopes);
  call.emplace_back(c10::SymInt(layer.sliding_window));
  call.emplace_back(step.block_table);
  call.emplace_back(layer.softcap);
  call.emplace_back(step.scheduler_metadata);
  call.emplace_back(layer.sinks);
  call.emplace_back(step.dynamic_causal);
  call.emplace_back(layer.k_scale);
  call.emplace_back(layer.v_scale);
  call.emplace_back(layer.kv_cache_dtype);
  attention.callBoxed(&call);
  torch::jit::drop(*stack, kArguments);
}

}  // namespace

TORCH_LIBRARY(vllm_bridge_attn, m) {
  m.def(
      "attend(Tensor query, Tensor key, Tensor value, Tensor(a!) output, "
      "str layer_name, Tensor? output_scale=None, "
      "Tensor(b!)? output_block_scale=None, Tensor? kv_cache_dummy_dep=None) -> ()");
  // The binding ops hold state rather than compute: one kernel for every
  // dispatch key.
  m.def(
      "bind_layer(str name, Tensor kv_cache, float scale, Tensor? alibi_slopes, "
      "int sliding_window, float softcap, Tensor? sinks, float k_scale, "
      "float v_scale, str kv_cache_dtype, str isa, bool writes_kv) -> ()",
      &bind_layer);
  m.def("unbind_layers() -> ()", &unbind_layers);
  m.def(
      "bind_step(str[] layer_names, Tensor slot_mapping, Tensor query_start_loc, "
      "Tensor seq_lens, Tensor block_table, Tensor scheduler_metadata, "
      "bool causal, Tensor? dynamic_causal, int num_actual_tokens) -> ()",
      &bind_step);
  m.def("unbind_step() -> ()", &unbind_step);
  m.def("bound() -> int[]", &bound);
}

TORCH_LIBRARY_IMPL(vllm_bridge_attn, CPU, m) {
  m.impl("attend", torch::CppFunction::makeFromBoxedFunction<&attend>());
}
