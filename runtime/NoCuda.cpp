//===- NoCuda.cpp - the CUDA entry points of a build without the toolkit --===//
#include "runtime/Device.h"
#include "runtime/Communicator.h"

namespace cpc {

bool cudaBackendBuilt() { return false; }

int cudaDeviceCount(std::string *why) {
  if (why)
    *why = "cpc was built without CUDA: install the toolkit (scripts/setup) and rebuild";
  return 0;
}

std::unique_ptr<Device> makeCudaDevice(int) {
  throw RuntimeError("cpc was built without CUDA: install the CUDA toolkit (scripts/setup) and rebuild");
}

std::unique_ptr<Communicator> makeNcclCommunicator(Device &, Communicator &) {
  throw RuntimeError("cpc was built without CUDA: the NCCL communicator needs the CUDA toolkit and NCCL "
                     "(scripts/setup), then a rebuild");
}

} // namespace cpc
