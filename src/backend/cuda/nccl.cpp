// NCCL loaded at run time, and NcclGroup: gradient sums on a stream of their own, so that
// they run while the backward pass goes on (nccl.h).
#include "backend/cuda/nccl.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/driver.h"
#include "backend/cuda/memory.h"
#include "backend/cuda/shared_library.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

// The parts of nccl.h forge uses (the ABI NCCL 2.x keeps): results, the id, the float sum.
using ncclResult_t = int;  // 0: ncclSuccess
using ncclComm_t = struct ncclComm*;
constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct ncclUniqueId {
  char internal[kIdBytes];
};
constexpr int kNcclFloat32 = 7;  // ncclFloat32 in ncclDataType_t
constexpr int kNcclSum = 0;      // ncclSum in ncclRedOp_t

struct Nccl {
  ncclResult_t (*get_version)(int*) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, int, int, ncclComm_t, CUstream) = nullptr;
  int version = 0;
};

struct LoadedNccl {
  std::unique_ptr<SharedLibrary> library;
  Nccl api;
  std::string error;
};

/// NCCL from the first of `names` dlopen finds, with every entry point forge uses.
LoadedNccl load(const std::vector<std::string>& names) {
  LoadedNccl out;
  try {
    out.library = std::make_unique<SharedLibrary>(SharedLibrary::open_first(
        names, "NCCL (NVIDIA's collective library; set FORGE_NCCL_LIBRARY to its path)"));
    const SharedLibrary& lib = *out.library;
    Nccl& n = out.api;
    n.get_version = lib.get<decltype(n.get_version)>("ncclGetVersion");
    n.error_string = lib.get<decltype(n.error_string)>("ncclGetErrorString");
    n.get_unique_id = lib.get<decltype(n.get_unique_id)>("ncclGetUniqueId");
    n.comm_init_rank = lib.get<decltype(n.comm_init_rank)>("ncclCommInitRank");
    n.comm_destroy = lib.get<decltype(n.comm_destroy)>("ncclCommDestroy");
    n.all_reduce = lib.get<decltype(n.all_reduce)>("ncclAllReduce");
    if (n.get_version(&n.version) != 0 || n.version < 20000)
      throw Error(ErrorKind::Device, "NCCL at " + lib.name() + " reports version " +
                                         std::to_string(n.version) + "; forge needs 2.x");
  } catch (const Error& e) {
    out.error = e.what();
    out.library.reset();
  }
  return out;
}

const LoadedNccl& loaded() {
  // Loaded once and kept until exit, as the driver is.
  static const LoadedNccl& l = *new LoadedNccl([] {
    std::vector<std::string> names = {"libnccl.so.2", "libnccl.so"};
    if (const char* path = std::getenv("FORGE_NCCL_LIBRARY"); path != nullptr && *path)
      names = {path};
    return load(names);
  }());
  return l;
}

const Nccl& nccl() {
  const LoadedNccl& l = loaded();
  if (!l.library) throw Error(ErrorKind::Unsupported, "cuda: data-parallel sums need " + l.error);
  return l.api;
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r == 0) return;
  const char* text = nccl().error_string(r);
  throw Error(ErrorKind::Backend, std::string("cuda: ") + call + ": " +
                                      (text != nullptr ? text : "NCCL error " + std::to_string(r)));
}

/// An event with timing, destroyed with this object.
class Event {
 public:
  Event() { check(driver().event_create(&e_, 0), "cuEventCreate"); }
  ~Event() {
    if (e_ != nullptr) driver().event_destroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return e_; }

 private:
  CUevent e_ = nullptr;
};

class NcclGroup final : public DeviceGroup {
 public:
  NcclGroup(const Context& context, const std::vector<uint8_t>& id, int rank, int size)
      : context_(context), rank_(rank), size_(size) {
    const Nccl& n = nccl();
    if (id.size() != kIdBytes)
      throw Error(ErrorKind::Format, "cuda: an NCCL id is " + std::to_string(kIdBytes) +
                                         " bytes, got " + std::to_string(id.size()));
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), kIdBytes);
    context_.make_current();  // NCCL takes the GPU of the thread's current context
    check(driver().stream_create(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    try {
      check_nccl(n.comm_init_rank(&comm_, size, uid, rank), "ncclCommInitRank");
    } catch (...) {
      driver().stream_destroy(stream_);
      throw;
    }
  }
  ~NcclGroup() override {
    context_.make_current();
    driver().stream_synchronize(stream_);
    nccl().comm_destroy(comm_);
    driver().stream_destroy(stream_);
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void start_sum(Tensor& t) override {
    if (!t.defined() || t.dtype() != DType::F32)
      throw Error(ErrorKind::DType, "cuda: a group sums defined F32 tensors");
    const auto* storage = dynamic_cast<const CudaStorage*>(t.storage().get());
    if (storage == nullptr || t.device().index != context_.ordinal())
      throw Error(ErrorKind::Device,
                  "cuda: the group of cuda:" + std::to_string(context_.ordinal()) +
                      " cannot sum a " + t.device().str() + " tensor");
    context_.make_current();
    // The sum waits for the compute stream's work so far (what wrote t), then runs on the
    // group's stream while later compute work goes on.
    const CUevent ready = next_event();
    check(driver().event_record(ready, context_.stream()), "cuEventRecord");
    check(driver().stream_wait_event(stream_, ready, 0), "cuStreamWaitEvent");
    const CUdeviceptr p = storage->address() + t.byte_offset();
    auto* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
    if (timeline_) {
      spans_.push_back({ready, next_event(), nullptr, "sum " + std::to_string(sums_)});
      check(driver().event_record(spans_.back().begin, stream_), "cuEventRecord");
    }
    check_nccl(nccl().all_reduce(ptr, ptr, static_cast<size_t>(t.numel()), kNcclFloat32, kNcclSum,
                                 comm_, stream_),
               "ncclAllReduce");
    if (timeline_) {
      spans_.back().end = next_event();
      check(driver().event_record(spans_.back().end, stream_), "cuEventRecord");
    }
    ++sums_;
  }

  void finish() override {
    context_.make_current();
    const CUevent done = next_event();
    check(driver().event_record(done, stream_), "cuEventRecord");
    check(driver().stream_wait_event(context_.stream(), done, 0), "cuStreamWaitEvent");
    if (timeline_) {
      const CUevent at = next_event();
      check(driver().event_record(at, context_.stream()), "cuEventRecord");
      spans_.push_back({at, nullptr, nullptr, "finish"});
    }
    sums_ = 0;
  }

  void set_timeline(bool on) override {
    timeline_ = on;
    spans_.clear();
    used_ = 0;
  }

  std::vector<GroupSpan> timeline() override {
    std::vector<GroupSpan> out;
    if (spans_.empty()) return out;
    context_.make_current();
    context_.synchronize();
    check(driver().stream_synchronize(stream_), "cuStreamSynchronize");
    const CUevent origin = spans_.front().ready;
    auto ms = [&](CUevent e) {
      float v = 0.0f;
      check(driver().event_elapsed_time(&v, origin, e), "cuEventElapsedTime");
      return static_cast<double>(v);
    };
    for (const Span& s : spans_) {
      if (s.begin == nullptr) {  // a point on the compute stream
        out.push_back({"compute", s.name, ms(s.ready), ms(s.ready)});
        continue;
      }
      out.push_back({"compute", "ready " + s.name.substr(4), ms(s.ready), ms(s.ready)});
      out.push_back({"sum", s.name, ms(s.begin), ms(s.end)});
    }
    spans_.clear();
    used_ = 0;
    return out;
  }

 private:
  struct Span {
    CUevent ready, begin, end;  // begin/end null: a point (finish)
    std::string name;
  };
  /// An event of the pool (reused once the timeline was read or the step ended).
  CUevent next_event() {
    if (!timeline_) {
      // Without a timeline two events suffice: the ready event of the sum in flight is
      // consumed by cuStreamWaitEvent when it is called, so it may be recorded again.
      if (pool_.size() < 2) pool_.push_back(std::make_unique<Event>());
      return pool_[(used_++) % 2]->get();
    }
    if (used_ == pool_.size()) pool_.push_back(std::make_unique<Event>());
    return pool_[used_++]->get();
  }

  const Context& context_;
  int rank_, size_;
  CUstream stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::vector<std::unique_ptr<Event>> pool_;
  size_t used_ = 0;
  int sums_ = 0;
  bool timeline_ = false;
  std::vector<Span> spans_;
};

}  // namespace

std::string nccl_unavailable_reason() { return loaded().error; }

std::string nccl_load_error(const std::string& path) { return load({path}).error; }

std::vector<uint8_t> nccl_new_id() {
  ncclUniqueId uid;
  check_nccl(nccl().get_unique_id(&uid), "ncclGetUniqueId");
  return {uid.internal, uid.internal + kIdBytes};
}

std::unique_ptr<DeviceGroup> nccl_join(const Context& context, const std::vector<uint8_t>& id,
                                       int rank, int size) {
  return std::make_unique<NcclGroup>(context, id, rank, size);
}

}  // namespace forge::cuda
