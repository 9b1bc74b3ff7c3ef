//===- Device.h - the backend interface: devices, memory, streams, events --===//
//
// The executor talks to the hardware only through this interface, so that the CPU (host memory,
// work done when called) and CUDA (device memory, work queued on streams) are two implementations
// of one contract. A Device owns one allocator per memory space, a compute stream and a
// communication stream (collectives queue there, so that they overlap compute; events order the
// two), and grow-only scratch buffers for kernels that need temporary memory. Copies and fills
// are queued on the compute stream; a copy into host memory returns when the bytes are there.
//
#ifndef CPC_RUNTIME_DEVICE_H
#define CPC_RUNTIME_DEVICE_H

#include "kernels/Kernel.h"
#include "kernels/KernelFault.h"
#include "kernels/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cpc {

/// Memory of one space (host or device). Blocks are 256-byte aligned and zero-filled.
class Allocator {
public:
  virtual ~Allocator() = default;
  virtual MemorySpace space() const = 0;
  /// Throws RuntimeError ("out of memory ...") when the space has no room.
  virtual void *allocate(size_t bytes) = 0;
  virtual void deallocate(void *ptr) = 0;
  /// Bytes held now and at most, since the allocator was made.
  int64_t bytesInUse() const { return inUse_; }
  int64_t peakBytes() const { return peak_; }

protected:
  void counted(int64_t delta) {
    inUse_ += delta;
    peak_ = inUse_ > peak_ ? inUse_ : peak_;
  }

private:
  int64_t inUse_ = 0, peak_ = 0;
};

/// An ordered queue of work (a CUDA stream; on the CPU work is done when called).
class Stream {
public:
  virtual ~Stream() = default;
  /// Waits until everything queued so far has run.
  virtual void synchronize() = 0;
  /// The native handle (cudaStream_t), null on the CPU.
  virtual void *native() const = 0;
};

/// A point in a stream's work that other streams (or the host) can wait for.
class Event {
public:
  virtual ~Event() = default;
  virtual void record(Stream &stream) = 0;
  /// Makes `stream` wait (without blocking the host) until the recorded point has run.
  virtual void waitOn(Stream &stream) = 0;
  /// Blocks the host until the recorded point has run.
  virtual void synchronize() = 0;
  /// Whether the recorded point has run (never blocks).
  virtual bool done() = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  /// Which device of its kind (the GPU ordinal; 0 on the CPU).
  virtual int index() const = 0;
  /// "cpu", or the GPU's name and ordinal, for messages.
  virtual std::string name() const = 0;
  /// Where tensors of this device live (Host on the CPU, Device on a GPU).
  MemorySpace tensorSpace() const { return kind() == DeviceKind::Cpu ? MemorySpace::Host : MemorySpace::Device; }
  virtual Allocator &allocator(MemorySpace space) = 0;
  virtual Stream &computeStream() = 0;
  virtual Stream &commStream() = 0;
  virtual std::unique_ptr<Event> makeEvent() = 0;

  /// Copies `bytes` from `src` (in `srcSpace`) to `dst` (in `dstSpace`), in order on the compute
  /// stream; returns when the bytes are in `dst` if it is host memory.
  virtual void copy(void *dst, MemorySpace dstSpace, const void *src, MemorySpace srcSpace, size_t bytes) = 0;
  /// `height` rows of `width` bytes from `src` (rows `srcPitch` bytes apart) to `dst` (rows
  /// `dstPitch` apart), both in tensor memory.
  virtual void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width, size_t height) = 0;
  /// Sets `bytes` of tensor memory at `dst` to zero bytes.
  virtual void fillZero(void *dst, size_t bytes) = 0;
  /// Waits until all queued work of both streams has run.
  virtual void synchronize() = 0;
  /// A grow-only tensor-memory buffer of at least `bytes`, one per `slot` (0..kScratchSlots-1):
  /// a kernel's temporaries. Valid until the next call with the same slot and a larger size.
  virtual void *scratch(int slot, size_t bytes) = 0;
  static constexpr int kScratchSlots = 4;

  /// Faults its kernels record instead of failing (kernels/KernelFault.h): the device tags the
  /// kernels launched from now on with `site`, and takeFault returns the first fault recorded
  /// since the last call (kind None when there is none; a fault of work still queued may show
  /// later) and clears it. The CPU's kernels fail their step themselves: it records nothing.
  virtual void setFaultSite(int64_t site) {}
  virtual kernels::KernelFault takeFault() { return {}; }
};

/// The host: malloc'd memory, work done when called.
std::unique_ptr<Device> makeCpuDevice();

/// GPU `ordinal` (CUDA runtime, cuBLASLt, cuDNN). Throws RuntimeError with one line when cpc was
/// built without CUDA, the machine has no usable GPU, or the ordinal is out of range.
std::unique_ptr<Device> makeCudaDevice(int ordinal);
/// Whether this build has the CUDA backend.
bool cudaBackendBuilt();
/// How many GPUs this process sees (0 without CUDA); `why` gets the reason when none.
int cudaDeviceCount(std::string *why = nullptr);

/// The device a plan for `kind` runs on for a process that is local rank `localRank` of its
/// machine (GPU localRank); throws RuntimeError when there is none.
std::unique_ptr<Device> makeDevice(DeviceKind kind, int localRank);

/// This process's rank among the ranks mpirun started on its machine (0 outside mpirun).
int localRank();
/// How many ranks mpirun started on this process's machine (1 outside mpirun).
int localRanks();
/// The cores this process may run on (its CPU affinity; at least 1).
int availableCores();
/// A one-line warning when `ranks` ranks of `threads` kernel threads each need more cores than
/// the machine's `cores` (or one rank more than its own `rankCores`): the pools then wait on
/// each other instead of computing. Empty when they fit, or for one thread per rank (mpirun's
/// --oversubscribe is the user's explicit choice there).
std::string oversubscriptionWarning(int ranks, int threads, int cores, int rankCores);
/// A one-line note when a rank runs `threads` kernel threads on an OpenBLAS whose GEMM cut points
/// cpc does not know (kernels/cpu/GemmCuts.h): its GEMMs then run on one thread each, so that
/// results still do not depend on the thread count. Empty otherwise.
std::string gemmThreadsNote(int threads);

/// The runtime's kernel registry: the CPU kernels and, when built, the CUDA kernels.
const kernels::KernelRegistry &kernelRegistry();

/// The (op, element type) pairs of `plan`'s steps that have no kernel for its device in
/// kernelRegistry(), as "cpc.op on f16 (N steps)": empty when every step can run. Collectives
/// run through the communicator on every device.
std::vector<std::string> missingKernels(const struct Plan &plan);

// Memory helpers for kernels that may run on either device (the collectives): tensor memory of
// `device` (the host when null).
void copyTensorBytes(Device *device, void *dst, const void *src, size_t bytes);
void copyTensorRows(Device *device, void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width,
                    size_t height);
void zeroTensorBytes(Device *device, void *dst, size_t bytes);
/// Scratch tensor memory of `device` (a thread-local host buffer when null).
void *tensorScratch(Device *device, int slot, size_t bytes);

} // namespace cpc

#endif
