//===- CudaDevice.cpp - one GPU through the CUDA runtime -------------------===//
#include "runtime/cuda/CudaDevice.h"
#include "kernels/cuda/CudaKernels.h"

#include <atomic>
#include <cstring>
#include <map>
#include <vector>

namespace cpc {

void checkCuda(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(status));
}
void checkCublas(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string(what) + ": cuBLAS status " + std::to_string((int)status));
}
void checkCudnn(cudnnStatus_t status, const char *what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw RuntimeError(std::string(what) + ": " + cudnnGetErrorString(status));
}

bool cudaBackendBuilt() { return true; }

int cudaDeviceCount(std::string *why) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why)
      *why = cudaGetErrorString(status);
    cudaGetLastError(); // clear it
    return 0;
  }
  if (count == 0 && why)
    *why = "no CUDA device";
  return count;
}

namespace {

/// cudaMalloc'd device memory (zero-filled), or pinned host memory (cudaMallocHost).
class CudaAllocator final : public Allocator {
public:
  CudaAllocator(MemorySpace space, int ordinal) : space_(space), ordinal_(ordinal) {}
  ~CudaAllocator() override {
    for (auto &[ptr, size] : sizes_)
      space_ == MemorySpace::Device ? cudaFree(ptr) : cudaFreeHost(ptr);
  }
  MemorySpace space() const override { return space_; }
  void *allocate(size_t bytes) override {
    size_t size = std::max<size_t>(256, (bytes + 255) / 256 * 256);
    void *ptr = nullptr;
    cudaError_t status = space_ == MemorySpace::Device ? cudaMalloc(&ptr, size) : cudaMallocHost(&ptr, size);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw RuntimeError("out of memory allocating " + std::to_string(size) + " bytes of " +
                         (space_ == MemorySpace::Device ? "memory on GPU " + std::to_string(ordinal_)
                                                        : std::string("pinned host memory")) +
                         " (" + cudaGetErrorString(status) + ")");
    }
    if (space_ == MemorySpace::Device) {
      // cudaMemset runs on the legacy default stream, which cpc's non-blocking streams do not
      // wait for: finish it before anything else may write the memory.
      checkCuda(cudaMemset(ptr, 0, size), "cudaMemset");
      checkCuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaMemset");
    } else
      std::memset(ptr, 0, size);
    sizes_[ptr] = size;
    counted((int64_t)size);
    return ptr;
  }
  void deallocate(void *ptr) override {
    auto it = sizes_.find(ptr);
    if (it == sizes_.end())
      return;
    counted(-(int64_t)it->second);
    sizes_.erase(it);
    space_ == MemorySpace::Device ? cudaFree(ptr) : cudaFreeHost(ptr);
  }

private:
  MemorySpace space_;
  int ordinal_;
  std::map<void *, size_t> sizes_;
};

class CudaStream final : public Stream {
public:
  CudaStream() { checkCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~CudaStream() override { cudaStreamDestroy(stream_); }
  void synchronize() override { checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void *native() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent final : public Event {
public:
  CudaEvent() { checkCuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void record(Stream &stream) override {
    checkCuda(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native())), "cudaEventRecord");
  }
  void waitOn(Stream &stream) override {
    checkCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native()), event_, 0), "cudaStreamWaitEvent");
  }
  void synchronize() override { checkCuda(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  bool done() override {
    cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady)
      return false;
    checkCuda(status, "cudaEventQuery");
    return true;
  }

private:
  cudaEvent_t event_ = nullptr;
};

cudaMemcpyKind copyKind(MemorySpace dst, MemorySpace src) {
  if (dst == MemorySpace::Device)
    return src == MemorySpace::Device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return src == MemorySpace::Device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

class CudaDeviceImpl final : public CudaDevice {
public:
  explicit CudaDeviceImpl(int ordinal)
      : ordinal_(ordinal), deviceMemory_((checkCuda(cudaSetDevice(ordinal), "cudaSetDevice"), MemorySpace::Device), ordinal),
        hostMemory_(MemorySpace::Host, ordinal) {
    cudaDeviceProp prop{};
    checkCuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    name_ = std::string(prop.name) + " (GPU " + std::to_string(ordinal) + ")";
    sms_ = prop.multiProcessorCount;
    capability_ = prop.major * 10 + prop.minor;
    checkCublas(cublasLtCreate(&lt_), "cublasLtCreate");
    checkCuda(cudaHostAlloc((void **)&faultHost_, sizeof(kernels::KernelFault), cudaHostAllocMapped),
              "cudaHostAlloc (fault record)");
    *faultHost_ = kernels::KernelFault{};
    checkCuda(cudaHostGetDevicePointer((void **)&faultDevice_, faultHost_, 0), "cudaHostGetDevicePointer");
    faultClaim_ = static_cast<int32_t *>(deviceMemory_.allocate(sizeof(int32_t))); // zero-filled
  }
  ~CudaDeviceImpl() override {
    cudaDeviceSynchronize();
    for (auto &s : scratch_)
      if (s.ptr)
        cudaFree(s.ptr);
    if (workspace_)
      deviceMemory_.deallocate(workspace_);
    if (dnn_)
      cudnnDestroy(dnn_);
    cublasLtDestroy(lt_);
    cudaFreeHost(faultHost_);
  }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  int index() const override { return ordinal_; }
  std::string name() const override { return name_; }
  Allocator &allocator(MemorySpace space) override { return space == MemorySpace::Device ? deviceMemory_ : hostMemory_; }
  Stream &computeStream() override { return compute_; }
  Stream &commStream() override { return comm_; }
  std::unique_ptr<Event> makeEvent() override { return std::make_unique<CudaEvent>(); }

  void copy(void *dst, MemorySpace dstSpace, const void *src, MemorySpace srcSpace, size_t bytes) override {
    if (!bytes || dst == src)
      return;
    checkCuda(cudaMemcpyAsync(dst, src, bytes, copyKind(dstSpace, srcSpace), compute_.get()), "cudaMemcpyAsync");
    // Into host memory: the bytes are there on return. From pageable host memory the driver has
    // staged (or copied) the source before cudaMemcpyAsync returns, so the caller may reuse it
    // and the host need not wait for the queue to drain.
    if (dstSpace == MemorySpace::Host)
      compute_.synchronize();
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width, size_t height) override {
    if (!width || !height)
      return;
    checkCuda(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height, cudaMemcpyDeviceToDevice, compute_.get()),
              "cudaMemcpy2DAsync");
  }
  void fillZero(void *dst, size_t bytes) override {
    if (bytes)
      checkCuda(cudaMemsetAsync(dst, 0, bytes, compute_.get()), "cudaMemsetAsync");
  }
  void synchronize() override {
    compute_.synchronize();
    comm_.synchronize();
  }
  void *scratch(int slot, size_t bytes) override {
    if (slot < 0 || slot >= kScratchSlots)
      throw RuntimeError("scratch slot " + std::to_string(slot) + " does not exist");
    Scratch &s = scratch_[slot];
    if (s.bytes < bytes) {
      // Stream-ordered: the old buffer is freed after the work queued on it, without waiting
      // for the whole device (cudaFree would, and a rank could then wait for a peer's transfer
      // that only comes after work this rank has not queued yet). The comm streams' work on a
      // scratch buffer is always followed by the compute stream waiting for it.
      if (s.ptr)
        checkCuda(cudaFreeAsync(s.ptr, compute_.get()), "cudaFreeAsync");
      void *ptr = nullptr;
      cudaError_t status = cudaMallocAsync(&ptr, bytes, compute_.get());
      if (status != cudaSuccess) {
        cudaGetLastError();
        s = Scratch{};
        throw RuntimeError("out of memory allocating " + std::to_string(bytes) + " bytes of scratch on GPU " +
                           std::to_string(ordinal_) + " (" + cudaGetErrorString(status) + ")");
      }
      s.ptr = ptr;
      s.bytes = bytes;
    }
    return s.ptr;
  }

  cudaStream_t stream() const override { return compute_.get(); }
  cudaStream_t commCudaStream() const override { return comm_.get(); }
  cublasLtHandle_t blasLt() override { return lt_; }
  cudnnHandle_t dnn() override {
    if (!dnn_) {
      checkCudnn(cudnnCreate(&dnn_), "cudnnCreate");
      checkCudnn(cudnnSetStream(dnn_, compute_.get()), "cudnnSetStream");
    }
    return dnn_;
  }
  void *gemmWorkspace(size_t *bytes) override {
    constexpr size_t kWorkspace = 32 << 20;
    if (!workspace_)
      workspace_ = deviceMemory_.allocate(kWorkspace);
    *bytes = kWorkspace;
    return workspace_;
  }
  int multiprocessors() const override { return sms_; }
  int computeCapability() const override { return capability_; }

  kernels::FaultSink faultSink() const override { return {faultClaim_, faultDevice_, faultSite_}; }
  void setFaultSite(int64_t site) override { faultSite_ = site; }
  kernels::KernelFault takeFault() override {
    volatile kernels::KernelFault *record = faultHost_;
    if (record->kind == 0)
      return {};
    std::atomic_thread_fence(std::memory_order_acquire); // the fields were written before kind
    kernels::KernelFault fault;
    fault.kind = record->kind;
    fault.dim = record->dim;
    fault.site = record->site;
    fault.value = record->value;
    fault.size = record->size;
    record->kind = 0;
    // Re-armed in stream order: a kernel queued before this that faults too finds the claim
    // taken and is not reported (the step already fails with the first).
    checkCuda(cudaMemsetAsync(faultClaim_, 0, sizeof(int32_t), compute_.get()), "cudaMemsetAsync (fault claim)");
    return fault;
  }

private:
  struct Scratch {
    void *ptr = nullptr;
    size_t bytes = 0;
  };
  int ordinal_;
  std::string name_;
  int sms_ = 0, capability_ = 0;
  CudaAllocator deviceMemory_, hostMemory_;
  CudaStream compute_, comm_;
  cublasLtHandle_t lt_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  void *workspace_ = nullptr;
  Scratch scratch_[kScratchSlots];
  kernels::KernelFault *faultHost_ = nullptr, *faultDevice_ = nullptr; // one record, two addresses
  int32_t *faultClaim_ = nullptr;                                        // device memory
  int64_t faultSite_ = 0;
};

} // namespace

std::unique_ptr<Device> makeCudaDevice(int ordinal) {
  std::string why;
  int count = cudaDeviceCount(&why);
  if (count == 0)
    throw RuntimeError("no usable CUDA GPU (" + why + ")");
  if (ordinal < 0 || ordinal >= count)
    throw RuntimeError("GPU " + std::to_string(ordinal) + " does not exist (this machine has " + std::to_string(count) +
                       ")");
  return std::make_unique<CudaDeviceImpl>(ordinal);
}

} // namespace cpc
