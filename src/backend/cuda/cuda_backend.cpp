// The CUDA backend's storage and transfers, and the registry of CUDA devices.
#include "backend/cuda/cuda_backend.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "backend/cuda/nccl.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

const CudaStorage& cuda_storage(const Storage& s, const char* what) {
  const auto* c = dynamic_cast<const CudaStorage*>(&s);
  if (!c)
    throw Error(ErrorKind::Device, std::string("cuda: ") + what + ": storage on " +
                                       s.device().str() + " is not CUDA memory");
  return *c;
}

void check_range(const Storage& s, size_t offset, size_t bytes, const char* what) {
  if (offset > s.bytes() || bytes > s.bytes() - offset)
    throw Error(ErrorKind::Backend, std::string("cuda: ") + what + " of " + std::to_string(bytes) +
                                        " bytes at offset " + std::to_string(offset) +
                                        " of a buffer of " + std::to_string(s.bytes()));
}

GpuInfo gpu_info(int ordinal) {
  const GpuList list = list_gpus();
  for (const GpuInfo& g : list.gpus)
    if (g.ordinal == ordinal) return g;
  throw Error(ErrorKind::Device, "cuda:" + std::to_string(ordinal) + ": no such GPU" +
                                     (list.why_none.empty() ? "" : " (" + list.why_none + ")"));
}

DeviceInfo device_info_of(const GpuInfo& g) {
  DeviceInfo info;
  info.device = Device("cuda", g.ordinal);
  info.name = g.name;
  info.kind = "discrete-gpu";
  info.memory_bytes = g.memory_bytes;
  info.limits.emplace_back("compute capability",
                           std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor));
  info.limits.emplace_back("multiprocessors", std::to_string(g.multiprocessors));
  return info;
}

// A recorded decode step: the executable graph, and every buffer its kernels touch, kept
// until the graph goes (scratch blocks then return to the allocator's cache).
class CudaGraph final : public Graph {
 public:
  CudaGraph(const Context& ctx, Allocator& allocator, CUgraph graph, CUgraphExec exec,
            std::vector<std::shared_ptr<Storage>> storages,
            std::vector<std::pair<CUdeviceptr, size_t>> blocks)
      : ctx_(ctx),
        allocator_(allocator),
        graph_(graph),
        exec_(exec),
        storages_(std::move(storages)),
        blocks_(std::move(blocks)) {}
  ~CudaGraph() override {
    ctx_.make_current();
    driver().stream_synchronize(ctx_.stream());  // a queued replay may still run it
    driver().graph_exec_destroy(exec_);
    driver().graph_destroy(graph_);
    for (const auto& [block, bytes] : blocks_) allocator_.give(block, bytes);
  }
  const Context& context() const { return ctx_; }
  CUgraphExec exec() const { return exec_; }

 private:
  const Context& ctx_;
  Allocator& allocator_;
  CUgraph graph_;
  CUgraphExec exec_;
  std::vector<std::shared_ptr<Storage>> storages_;
  std::vector<std::pair<CUdeviceptr, size_t>> blocks_;
};

}  // namespace

CUdeviceptr address(const Tensor& t) {
  return static_cast<const CudaStorage&>(*t.storage()).address() + t.byte_offset();
}

CudaBackend::CudaBackend(int ordinal)
    : ordinal_(ordinal),
      ctx_(std::make_unique<Context>(ordinal)),
      allocator_(std::make_unique<Allocator>(*ctx_)),
      kernels_(std::make_unique<Kernels>(*ctx_)),
      gemm_(std::make_unique<Gemm>(*ctx_, *allocator_)) {
  check(driver().device_get_attribute(&attention_smem_optin_,
                                      CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                      ctx_->device()),
        "cuDeviceGetAttribute");
  check(driver().device_get_attribute(&multiprocessors_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                      ctx_->device()),
        "cuDeviceGetAttribute");
  {
    const size_t bytes = kTicketCounters * sizeof(uint32_t);
    ticket_counters_ = allocator_->take(bytes);
    ctx_->make_current();
    check(driver().memset_d8_async(ticket_counters_, 0, bytes, ctx_->stream()), "cuMemsetD8Async");
    ctx_->synchronize();
  }
  if (const char* v = std::getenv("FORGE_CUDA_PRECISION"); v && *v) {
    try {
      set_setting("precision", v);
    } catch (const Error& e) {
      throw Error(ErrorKind::Format, std::string("FORGE_CUDA_PRECISION: ") + e.what());
    }
  }
  add_op_methods(*this);
  add_kernel(Op::softmax_xent, [](Backend& b, const OpCall& c) {
    static_cast<CudaBackend&>(b).softmax_xent(c.in(0), c.out(0), c.out(1));
  });
  register_weight_kernels();
  register_fused_kernels();
}

CudaBackend::~CudaBackend() {
  ctx_->synchronize();
  allocator_->give(ticket_counters_, kTicketCounters * sizeof(uint32_t));
  gemm_.reset();
  kernels_.reset();
  allocator_.reset();
}

DeviceInfo CudaBackend::info() const {
  DeviceInfo info = device_info_of(gpu_info(ordinal_));
  size_t free = 0, total = 0;
  ctx_->make_current();
  if (driver().mem_get_info(&free, &total) == CUDA_SUCCESS)
    info.limits.emplace_back("free memory", std::to_string(free >> 20) + " MiB");
  info.limits.emplace_back("forge's memory",
                           std::to_string(allocator_->bytes_in_use() >> 20) + " MiB in use, " +
                               std::to_string(allocator_->bytes_cached() >> 20) + " MiB cached");
  info.limits.emplace_back("shared memory per block (opt-in)",
                           std::to_string(attention_smem_optin_ >> 10) + " KiB");
  using P = GemmShape::Precision;
  info.limits.emplace_back("matmul", precision_ == P::tf32   ? "TF32 tensor cores"
                                     : precision_ == P::bf16 ? "bf16 tensor cores"
                                                             : "fp32");
  return info;
}

std::shared_ptr<Storage> CudaBackend::allocate(size_t bytes) {
  return std::make_shared<CudaStorage>(Device("cuda", ordinal_), bytes, *allocator_);
}

std::shared_ptr<Storage> CudaBackend::allocate_zeros(size_t bytes) {
  auto s = std::make_shared<CudaStorage>(Device("cuda", ordinal_), bytes, *allocator_);
  if (capturing_) keep(*s);  // the memset is part of the graph
  if (bytes > 0) {
    ctx_->make_current();
    check(driver().memset_d8_async(s->address(), 0, bytes, ctx_->stream()), "cuMemsetD8Async");
    transfers_.fetch_add(1, std::memory_order_relaxed);
  }
  return s;
}

void CudaBackend::write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) {
  const CudaStorage& d = cuda_storage(dst, "write");
  check_range(d, dst_offset, bytes, "a write");
  check_not_capturing("a host write");
  if (bytes == 0) return;
  ctx_->make_current();
  // From pageable memory the call returns once the bytes are staged: src may be reused.
  check(driver().memcpy_htod_async(d.address() + dst_offset, src, bytes, ctx_->stream()),
        "cuMemcpyHtoDAsync_v2");
  transfers_.fetch_add(1, std::memory_order_relaxed);
}

void CudaBackend::read(const Storage& src, size_t src_offset, void* dst, size_t bytes) {
  const CudaStorage& s = cuda_storage(src, "read");
  check_range(s, src_offset, bytes, "a read");
  check_not_capturing("a host read");
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (bytes == 0) return;
  ctx_->make_current();
  check(driver().memcpy_dtoh_async(dst, s.address() + src_offset, bytes, ctx_->stream()),
        "cuMemcpyDtoHAsync_v2");
  ctx_->synchronize();
  // A read hands the device work of its own (the copy out), as a submit would.
  waits_.fetch_add(1, std::memory_order_relaxed);
  work_at_wait_ = work_queued();
}

void CudaBackend::copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
                       size_t bytes) {
  const CudaStorage& s = cuda_storage(src, "copy");
  const CudaStorage& d = cuda_storage(dst, "copy");
  check_range(s, src_offset, bytes, "a copy");
  check_range(d, dst_offset, bytes, "a copy");
  if (bytes == 0) return;
  if (capturing_) {
    keep(s);
    keep(d);
  }
  ctx_->make_current();
  check(driver().memcpy_dtod_async(d.address() + dst_offset, s.address() + src_offset, bytes,
                                   ctx_->stream()),
        "cuMemcpyDtoDAsync_v2");
  transfers_.fetch_add(1, std::memory_order_relaxed);
}

std::string CudaBackend::group_unavailable_reason() const { return nccl_unavailable_reason(); }

std::vector<uint8_t> CudaBackend::new_group_id() { return nccl_new_id(); }

std::unique_ptr<DeviceGroup> CudaBackend::join_group(const std::vector<uint8_t>& id, int rank,
                                                     int size) {
  check_not_capturing("joining a group");
  return nccl_join(*ctx_, id, rank, size);
}

void CudaBackend::synchronize() {
  check_not_capturing("a wait for the device");
  ctx_->synchronize();
  // Counted as a submit only when work was queued since the last wait.
  const uint64_t queued = work_queued();
  if (work_at_wait_.exchange(queued) != queued) waits_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t CudaBackend::work_queued() const {
  return kernels_->launches() + gemm_launches_.load(std::memory_order_relaxed) +
         transfers_.load(std::memory_order_relaxed) + replays_.load(std::memory_order_relaxed);
}

DeviceStats CudaBackend::stats() const {
  DeviceStats s;
  s.counted = true;
  // Kernels start as they are launched; the host's waits for them stand for the submits of
  // a backend that batches its work (a decode step: one wait per token).
  s.submits = waits_.load(std::memory_order_relaxed);
  s.allocations = allocator_->device_allocations();
  s.dispatches = kernels_->launches() + gemm_launches_.load(std::memory_order_relaxed);
  s.reads = reads_.load(std::memory_order_relaxed);
  s.replays = replays_.load(std::memory_order_relaxed);
  s.peak_bytes = allocator_->peak_bytes_in_use();
  return s;
}

CUdeviceptr CudaBackend::ptr(const Tensor& t) {
  if (capturing_) keep(static_cast<const CudaStorage&>(*t.storage()));
  return address(t);
}

void CudaBackend::keep(const CudaStorage& s) {
  if (kept_seen_.insert(&s).second)
    kept_storages_.push_back(std::const_pointer_cast<CudaStorage>(s.shared_from_this()));
}

void CudaBackend::give_scratch(CUdeviceptr block, size_t bytes) {
  if (capturing_)
    kept_blocks_.emplace_back(block, bytes);
  else
    allocator_->give(block, bytes);
}

void CudaBackend::check_not_capturing(const char* what) const {
  if (capturing_)
    throw Error(ErrorKind::Backend, "cuda:" + std::to_string(ordinal_) + ": " + what +
                                        " while a step is being recorded");
}

void CudaBackend::begin_capture() {
  if (!can_capture())
    throw Error(ErrorKind::Unsupported,
                "cuda:" + std::to_string(ordinal_) + ": no recording while profiling");
  if (capturing_)
    throw Error(ErrorKind::Backend,
                "cuda:" + std::to_string(ordinal_) + ": a step is already being recorded");
  ctx_->make_current();
  check(driver().stream_begin_capture(ctx_->stream(), CU_STREAM_CAPTURE_MODE_RELAXED),
        "cuStreamBeginCapture_v2");
  capturing_ = true;
}

std::shared_ptr<Graph> CudaBackend::end_capture() {
  if (!capturing_)
    throw Error(ErrorKind::Backend,
                "cuda:" + std::to_string(ordinal_) + ": no step is being recorded");
  ctx_->make_current();
  capturing_ = false;
  CUgraph graph = nullptr;
  CUresult r = driver().stream_end_capture(ctx_->stream(), &graph);
  CUgraphExec exec = nullptr;
  if (r == CUDA_SUCCESS) {
    r = driver().graph_instantiate(&exec, graph, 0);
    if (r != CUDA_SUCCESS) driver().graph_destroy(graph);
  }
  std::vector<std::shared_ptr<Storage>> storages = std::move(kept_storages_);
  std::vector<std::pair<CUdeviceptr, size_t>> blocks = std::move(kept_blocks_);
  kept_storages_.clear();
  kept_blocks_.clear();
  kept_seen_.clear();
  if (r != CUDA_SUCCESS) {
    for (const auto& [block, bytes] : blocks) allocator_->give(block, bytes);
    check(r, "cuStreamEndCapture / cuGraphInstantiateWithFlags");
  }
  return std::make_shared<CudaGraph>(*ctx_, *allocator_, graph, exec, std::move(storages),
                                     std::move(blocks));
}

void CudaBackend::abort_capture() {
  if (!capturing_) return;
  ctx_->make_current();
  capturing_ = false;
  CUgraph graph = nullptr;
  if (driver().stream_end_capture(ctx_->stream(), &graph) == CUDA_SUCCESS && graph)
    driver().graph_destroy(graph);
  for (const auto& [block, bytes] : kept_blocks_) allocator_->give(block, bytes);
  kept_blocks_.clear();
  kept_storages_.clear();
  kept_seen_.clear();
}

void CudaBackend::replay(const Graph& g) {
  const auto* cg = dynamic_cast<const CudaGraph*>(&g);
  if (!cg || &cg->context() != ctx_.get())
    throw Error(ErrorKind::Device, "cuda: replay of a graph another device made");
  check_not_capturing("a replay");
  ctx_->make_current();
  check(driver().graph_launch(cg->exec(), ctx_->stream()), "cuGraphLaunch");
  replays_.fetch_add(1, std::memory_order_relaxed);
}

namespace {
void check_setting_name(const std::string& name, int ordinal) {
  if (name != "precision")
    throw Error(ErrorKind::Unsupported, "device cuda:" + std::to_string(ordinal) +
                                            " has no setting \"" + name + "\" (it has: precision)");
}
}  // namespace

void CudaBackend::set_setting(const std::string& name, const std::string& value) {
  check_setting_name(name, ordinal_);
  using P = GemmShape::Precision;
  if (value == "fp32")
    precision_ = P::fp32;
  else if (value == "tf32")
    precision_ = P::tf32;
  else if (value == "bf16")
    precision_ = P::bf16;
  else
    throw Error(ErrorKind::Format, "cuda setting precision: \"" + value +
                                       "\" is not fp32, tf32 or bf16 (the products' arithmetic)");
}

std::string CudaBackend::setting(const std::string& name) const {
  check_setting_name(name, ordinal_);
  using P = GemmShape::Precision;
  return precision_ == P::tf32 ? "tf32" : precision_ == P::bf16 ? "bf16" : "fp32";
}

Backend& backend(int ordinal) {
  static std::mutex mutex;
  // Backends live until exit (tensors in static storage may outlive any teardown order).
  static auto* backends = new std::map<int, std::unique_ptr<CudaBackend>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = backends->find(ordinal);
  if (it != backends->end()) return *it->second;
  auto b = std::make_unique<CudaBackend>(ordinal);
  return *backends->emplace(ordinal, std::move(b)).first->second;
}

std::vector<DeviceInfo> device_infos() {
  std::vector<DeviceInfo> out;
  for (const GpuInfo& g : list_gpus().gpus) out.push_back(device_info_of(g));
  return out;
}

}  // namespace forge::cuda

namespace forge {

// The one place that tells the registry about CUDA (FORGE_BACKEND(cuda), CMake).
BackendRegistration cuda_backend_registration() {
  BackendRegistration r;
  r.name = "cuda";
  r.indexed = true;
  r.open = [](int index) -> Backend& { return cuda::backend(index); };
  r.devices = [] { return cuda::device_infos(); };
  return r;
}

}  // namespace forge
